#!/bin/sh
# The service's command (compose.yaml: redis-server --appendonly yes), on 127.0.0.1:$REDIS_PORT.
set -eu
exec "$@" --port "${REDIS_PORT:-6379}" --bind 127.0.0.1
