"""The edge: ``python -m worker`` (argument parsing in ``main``), serving a worker from settings without
argparse (``serve``), ``health``, the exit codes and the process supervisor."""
