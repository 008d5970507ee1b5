"""The read loop: the worker, its executor and slots, the partitions rotation, outcomes, upkeep and scheduler chores."""
