"""The exit codes of ``python -m worker``: 0 success (and a clean stop on SIGTERM/SIGINT); 1 a failure at
run time (Redis unreachable, an unhealthy ``health``); 2 a bad setting or argument, named in one line."""

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
