#!/bin/sh
exec /usr/bin/redis-cli -p "${REDIS_PORT:-6379}" "$@"
