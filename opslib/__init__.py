"""opslib: the queue's state as pandas DataFrames, for analysts in Jupyter."""
