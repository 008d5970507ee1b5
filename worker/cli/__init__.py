"""``python -m worker``: argument parsing, the commands, health and the process supervisor."""
