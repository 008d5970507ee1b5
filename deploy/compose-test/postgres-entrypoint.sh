#!/bin/sh
# What the official image does with POSTGRES_USER, POSTGRES_PASSWORD(_FILE) and POSTGRES_DB on an
# empty data directory (initdb, the password, the database), then PostgreSQL on
# 127.0.0.1:$PGPORT: local connections trusted, TCP ones by password (scram-sha-256).
# UTF8 like the official image (initdb would pick SQL_ASCII in this image without a locale).
set -eu
BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
: "${POSTGRES_USER:=postgres}" "${POSTGRES_DB:=$POSTGRES_USER}"
# POSTGRES_PASSWORD_FILE (compose.yaml's secret), as the official image reads it.
if [ -n "${POSTGRES_PASSWORD_FILE:-}" ]; then POSTGRES_PASSWORD=$(cat "$POSTGRES_PASSWORD_FILE"); fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    pwfile=$(mktemp)
    printf '%s\n' "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is required}" >"$pwfile"
    "$BIN/initdb" --pgdata="$PGDATA" --username="$POSTGRES_USER" --pwfile="$pwfile" \
        --auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 >/dev/null
    rm -f "$pwfile"
    if [ "$POSTGRES_DB" != postgres ]; then
        echo "CREATE DATABASE \"$POSTGRES_DB\" OWNER \"$POSTGRES_USER\"" |
            "$BIN/postgres" --single -D "$PGDATA" -j postgres >/dev/null
    fi
    echo "initialized $PGDATA: user $POSTGRES_USER, database $POSTGRES_DB"
fi
exec "$BIN/postgres" -D "$PGDATA" -c listen_addresses=127.0.0.1 \
    -c unix_socket_directories=/var/run/postgresql
