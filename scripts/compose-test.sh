#!/usr/bin/env bash
# `make compose-test`: compose.yaml's whole stack brought up for real and exercised from
# outside the containers, offline (root; docs/operations.md, "The compose test", has the why).
#
# Engine: Debian's podman 4.3 with Debian's podman-compose 1.0.3, run through
# deploy/compose-test/podman_compose_host.py (keeps `network_mode: host` off any
# bridge network; gives each container a hostname of its own). Images: the project's,
# built by `compose build` from the Dockerfile on the offline base (scripts/container-base.sh),
# and stand-ins for redis:7 and postgres:16 built from deploy/compose-test/Dockerfile with
# Debian's packages. deploy/compose-test/override.yaml, loaded only here, names the
# stand-ins and puts every service on the host network at 127.0.0.1 on free ports.
#
# Steps (every wait polls against a deadline):
#   1. tools (podman, runc, debootstrap, podman-compose); 2. base image (kept between runs)
#   3. compose build (the project's images and the two stand-ins)
#   4. compose up: redis, postgres and the stand-ins first, waited for as their
#      `depends_on` conditions say (podman-compose 1.0.3 does not wait), then the rest
#   5. every service healthy by its healthcheck (run with `podman healthcheck run`: without
#      systemd podman schedules none) or started; the worker migrated Stagedoor's schema
#   6. both worker replicas are consumers; 200 send_email jobs (Python API, from the host)
#      and one by `compose exec worker python -m worker enqueue` run between them and
#      reach the mail stand-in
#   7. a job that fails goes to jobs:dead; JupyterLab answers on its port with the token
#      (and refuses without it); opslib inside the jupyter container sees the same dead letters
#   8. `compose stop` while 8 slow jobs run: they finish, each worker exits 0 within
#      stop_grace_period, nothing is left pending (Redis started again to look)
#   9. `compose down -v` leaves no container, volume or network of the project
#
# It leaves the images (base, stand-ins, stagedoor-worker, stagedoor-notebook) and podman's
# build cache, so the next run takes about 2 minutes. Environment: DEBIAN_MIRROR,
# REBUILD_BASE=1, PIP_CERT (default /etc/ssl/certs/ca-certificates.crt when it exists),
# KEEP_LOGS=DIR (copy every container's log there).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=$ROOT/.venv/bin/python

# ----------------------------------------------------- names this script relies on
BASE_IMAGE=localhost/stagedoor-base:bookworm
OVERRIDE=deploy/compose-test/override.yaml
ENGINE=(/usr/bin/python3 "$ROOT/deploy/compose-test/podman_compose_host.py")
PROJECT=sdcompose$$
DEPENDENCIES=(redis postgres mail payrail) # what the workers' depends_on names
WORKER=worker
JUPYTER=jupyter
MAIL=mail
WORKER_CLI=(python -m worker)          # in the worker image
MAIL_KIND=send_email                   # fields: email, template, order_id
MAIL_TEMPLATE=order_confirmation
FAILING_JOB=(render_tickets order_id=999999999) # no such order: dead after its one retry
SCHEMA_TABLES=(orders outbox)          # two of the tables the worker's migration creates
# -----------------------------------------------------------------------------------

WORK=$(mktemp -d "/tmp/stagedoor-compose-test.XXXXXX")
LOG=$WORK/compose.log
UP=0

step() { printf '\n== [%3ds] %s\n' "$SECONDS" "$*"; }
fail() { printf 'FAILED: %s\n' "$*" >&2; exit 1; }
# shellcheck source=scripts/container-base.sh
source "$ROOT/scripts/container-base.sh"
free_port() { "$PY" -c 'from worker.embedded.servers import free_port; print(free_port())'; }
compose() { "${ENGINE[@]}" -p "$PROJECT" -f compose.yaml -f "$OVERRIDE" "$@"; }
# compose, its output (every podman command it runs) into $LOG; the last lines on failure.
quietly() {
    echo "\$ compose $*" >>"$LOG"
    compose "$@" >>"$LOG" 2>&1 || { tail -25 "$LOG" >&2; fail "compose $* failed"; }
}
containers_of() { # the project's containers of one service, by container number
    podman ps -a --filter "label=io.podman.compose.project=$PROJECT" \
        --filter "label=com.docker.compose.service=$1" --format '{{.Names}}' | sort
}
leftovers() {
    podman ps -a --filter "label=io.podman.compose.project=$PROJECT" --format 'container {{.Names}}'
    podman volume ls --format '{{.Name}}' | grep "^${PROJECT}_" | sed 's/^/volume /' || true
    podman network ls --format '{{.Name}}' | grep "^${PROJECT}" | sed 's/^/network /' || true
}

cleanup() {
    local status=$?
    if ((UP)); then
        if [[ -n ${KEEP_LOGS:-} ]]; then
            mkdir -p "$KEEP_LOGS"
            for name in $(podman ps -a --filter "label=io.podman.compose.project=$PROJECT" --format '{{.Names}}'); do
                podman logs "$name" >"$KEEP_LOGS/$name.log" 2>&1 || true
            done
            cp "$LOG" "$KEEP_LOGS/compose.log"
        fi
        compose down -v >>"$LOG" 2>&1 || true
        for name in $(podman ps -a --filter "label=io.podman.compose.project=$PROJECT" --format '{{.Names}}'); do
            podman rm --force --time 0 "$name" >/dev/null 2>&1 || true
        done
        for volume in $(podman volume ls --format '{{.Name}}' | grep "^${PROJECT}_" || true); do
            podman volume rm --force "$volume" >/dev/null 2>&1 || true
        done
    fi
    rm -rf "$WORK"
    if [[ $status -eq 0 ]]; then
        printf '\n== [%3ds] compose test passed\n' "$SECONDS"
    else
        printf '\n== [%3ds] compose test FAILED (exit %d)\n' "$SECONDS" "$status" >&2
    fi
}
trap cleanup EXIT

# Poll `command...` until it succeeds or `seconds` pass.
wait_for() {
    local what=$1 seconds=$2 deadline
    shift 2
    deadline=$((SECONDS + seconds))
    until "$@" >"$WORK/wait.out" 2>&1; do
        ((SECONDS <= deadline)) || { tail -5 "$WORK/wait.out" >&2; fail "$what: not within $seconds s"; }
        sleep 0.5
    done
}
running() { [[ $(podman inspect --format '{{.State.Status}}' "$1") == running ]]; }
healthy() { running "$1" && podman healthcheck run "$1"; }
has_healthcheck() { [[ $(podman inspect --format '{{if .Config.Healthcheck}}{{len .Config.Healthcheck.Test}}{{else}}0{{end}}' "$1") != 0 ]]; }
# Wait for each container of the given services: healthy when it has a healthcheck
# (compose's or its image's), else running.
wait_services() {
    local service name
    for service in "$@"; do
        for name in $(containers_of "$service"); do
            if [[ $no_healthcheck != *" $service "* ]] && has_healthcheck "$name"; then
                wait_for "$name healthy" 90 healthy "$name" ||
                    { podman logs --tail 20 "$name" >&2; exit 1; }
                echo "$name: healthy ($(podman inspect --format '{{join .Config.Healthcheck.Test " "}}' "$name"))"
            else
                wait_for "$name running" 30 running "$name"
                echo "$name: started (its healthcheck is disabled or it has none)"
            fi
        done
    done
}
py() { "$PY" - "$@"; }

# ---------------------------------------------------------------------------- 1
step "1. tools: podman, runc, debootstrap, podman-compose (Debian's)"
[[ -x $PY ]] || fail "$PY is missing: run \`make venv\` first"
ensure_container_tools podman-compose:podman-compose
/usr/bin/python3 -c 'import podman_compose; print("podman-compose", podman_compose.__version__)'

# ---------------------------------------------------------------------------- 2
step "2. base image $BASE_IMAGE"
ensure_base_image

# ---------------------------------------------------------------------------- 3
export SDCT_REDIS_PORT=$(free_port) SDCT_POSTGRES_PORT=$(free_port) SDCT_MAIL_PORT=$(free_port)
export SDCT_PAYRAIL_PORT=$(free_port) SDCT_JUPYTER_PORT=$(free_port) SDCT_QUEUE_PREFIX=""
export POSTGRES_PASSWORD=$("$PY" -c 'import secrets; print(secrets.token_hex(12))')
export JUPYTER_TOKEN=$("$PY" -c 'import secrets; print(secrets.token_hex(12))')
export LOG_LEVEL=DEBUG # each job's outcome is a log line: the replicas' shares are counted from them
export REDIS_URL=redis://127.0.0.1:$SDCT_REDIS_PORT/0 QUEUE_PREFIX=$SDCT_QUEUE_PREFIX
DATABASE_URL=postgresql://stagedoor:$POSTGRES_PASSWORD@127.0.0.1:$SDCT_POSTGRES_PORT/stagedoor
# compose.yaml's secrets: files, mounted at /run/secrets/<name> (readable by the containers' users).
export STAGEDOOR_SECRETS=$WORK/secrets
mkdir -p "$STAGEDOOR_SECRETS"
printf '%s' "$POSTGRES_PASSWORD" >"$STAGEDOOR_SECRETS/postgres_password"
printf '%s' "$DATABASE_URL" >"$STAGEDOOR_SECRETS/database_url"
chmod 644 "$STAGEDOOR_SECRETS"/*
MAIL_URL=http://127.0.0.1:$SDCT_MAIL_PORT
JUPYTER_URL=http://127.0.0.1:$SDCT_JUPYTER_PORT
networks_before=$(podman network ls --format '{{.Name}}' | sort)

# What compose.yaml with the override says: each service's image; which disable their image's
# healthcheck (podman-compose 1.0.3 ignores `disable: true`: those are waited for as started).
merged() {
    py "$OVERRIDE" "$1" <<'EOF'
import sys, yaml
services = yaml.safe_load(open("compose.yaml"))["services"]
for name, service in yaml.safe_load(open(sys.argv[1]))["services"].items():
    services[name] = {**services[name], **service}
if sys.argv[2] == "images":
    print(" ".join(sorted({s["image"] for s in services.values()})))
elif sys.argv[2] == "build-services":  # one service per image built (several share stagedoor-worker)
    print(" ".join({s["image"]: n for n, s in reversed(services.items()) if "build" in s}.values()))
else:
    print(" ".join(n for n, s in services.items() if s.get("healthcheck", {}).get("disable")))
EOF
}
images=$(merged images)
no_healthcheck=" $(merged no-healthcheck) "

step "3. compose build: the project's images (Dockerfile) and the stand-ins, on $BASE_IMAGE"
build_args=(--build-arg "BASE=$BASE_IMAGE")
podman_build_args="--format docker --network=host"
PIP_CERT=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
if [[ -f $PIP_CERT ]]; then
    podman_build_args+=" --volume $PIP_CERT:/run/host-ca.crt:ro"
    build_args+=(--build-arg PIP_CERT=/run/host-ca.crt)
    echo "pip's CA bundle: $PIP_CERT (mounted for the build, not stored in the image)"
fi
# shellcheck disable=SC2046 # one service per image: podman-compose 1.0.3 builds each service
quietly --podman-build-args="$podman_build_args" build "${build_args[@]}" $(merged build-services)
for image in $images; do podman image ls --format '{{.Repository}}:{{.Tag}} {{.ID}} {{.Size}}' "$image"; done

# ---------------------------------------------------------------------------- 4
step "4. compose up: ${DEPENDENCIES[*]} first (what the workers depend on), then the rest"
UP=1
quietly up -d --no-build "${DEPENDENCIES[@]}"
wait_services "${DEPENDENCIES[@]}"
quietly up -d --no-build
podman ps --filter "label=io.podman.compose.project=$PROJECT" --format '{{.Names}}  {{.Image}}  {{.Status}}'

# ---------------------------------------------------------------------------- 5
step "5. every service healthy or started; the worker migrated Stagedoor's schema"
wait_services "$WORKER" "$JUPYTER"
py "$DATABASE_URL" "${SCHEMA_TABLES[@]}" <<'EOF'
import sys, psycopg
with psycopg.connect(sys.argv[1], connect_timeout=5) as conn:
    tables = [r[0] for r in conn.execute("SELECT tablename::text FROM pg_tables WHERE schemaname = 'public' ORDER BY 1")]
    version = conn.execute("SHOW server_version").fetchone()[0]
missing = set(sys.argv[2:]) - set(tables)
print(f"PostgreSQL {version} (password from the postgres_password secret): {len(tables)} tables: {', '.join(tables)}")
sys.exit(f"missing tables: {missing}" if missing else 0)
EOF

# ---------------------------------------------------------------------------- 6
step "6. both replicas consume the queue: 200 $MAIL_KIND jobs (Python API) + 1 by compose exec"
mapfile -t workers < <(containers_of "$WORKER")
((${#workers[@]} == 2)) || fail "expected 2 $WORKER containers, found ${#workers[@]}: ${workers[*]}"
consumers() {
    py "$@" <<'EOF'
import os, sys, redis
from worker.store.keys import GROUP, Keys
client = redis.Redis.from_url(os.environ["REDIS_URL"], decode_responses=True)
names = {c["name"] for c in client.xinfo_consumers(Keys(os.environ["QUEUE_PREFIX"]).jobs, GROUP)}
wanted = {f"{hostname}-1" for hostname in sys.argv[1:]}
print(f"consumers of group {GROUP}: {', '.join(sorted(names))}")
sys.exit(0 if wanted <= names else 1)
EOF
}
hostnames=()
for name in "${workers[@]}"; do hostnames+=("$(podman inspect --format '{{.Config.Hostname}}' "$name")"); done
py "$MAIL_KIND" "$MAIL_TEMPLATE" <<'EOF'
import os, sys, redis
from worker.store.enqueue import enqueue
client = redis.Redis.from_url(os.environ["REDIS_URL"])
kind, template = sys.argv[1:]
for i in range(200):
    enqueue(client, kind, {"email": f"fan{i}@example.test", "template": template, "order_id": str(10_000 + i)},
            prefix=os.environ["QUEUE_PREFIX"])
print(f"enqueued 200 {kind} jobs from the host")
EOF
quietly exec -T "$WORKER" "${WORKER_CLI[@]}" enqueue "$MAIL_KIND" email=compose-exec@example.test \
    template="$MAIL_TEMPLATE" order_id=4242
echo "enqueued 1 $MAIL_KIND job with \`compose exec -T $WORKER ${WORKER_CLI[*]} enqueue ...\`"
"$PY" scripts/queue_probe.py wait-drained --timeout 90 || fail "the replicas did not drain the queue"
# A consumer appears in the group once it is served entries (a blocked XREADGROUP of an idle
# worker does not add it on Redis 7.0), so this is looked at after the jobs ran.
wait_for "both replicas in the consumer group" 10 consumers "${hostnames[@]}"
consumers "${hostnames[@]}"
# Each replica's share, from its DEBUG lines "Job <kind> <id> succeeded in ... ms."
succeeded() { podman logs "$1" 2>&1 | grep -c "\"Job $MAIL_KIND [^ ]* succeeded in" || true; }
total=0
for name in "${workers[@]}"; do
    n=$(succeeded "$name")
    echo "$name ran $n $MAIL_KIND jobs"
    ((n > 0)) || fail "$name ran none: the replicas do not share the queue"
    total=$((total + n))
done
((total == 201)) || fail "the replicas ran $total $MAIL_KIND jobs, expected 201"
py "$MAIL_URL" <<'EOF'
import sys, httpx
messages = httpx.get(f"{sys.argv[1]}/_stand-in/messages", timeout=5, trust_env=False).json()
exec_one = [m for m in messages if m["to"] == "compose-exec@example.test"]
print(f"the mail stand-in holds {len(messages)} messages; the compose exec one: {exec_one[0]['subject'] if exec_one else None!r}")
sys.exit(0 if len(messages) == 201 and exec_one and "4242" in exec_one[0]["subject"] else 1)
EOF

# ---------------------------------------------------------------------------- 7
step "7. a dead letter; JupyterLab with its token; opslib in the jupyter container sees it"
quietly exec -T "$WORKER" "${WORKER_CLI[@]}" enqueue "${FAILING_JOB[@]}"
dead_from_host() {
    py <<'EOF'
import json, sys, opslib
frame = opslib.dead_letters()
print(json.dumps(sorted(zip(frame["job_id"].astype(str), frame["kind"].astype(str)))))
sys.exit(0 if len(frame) else 1)
EOF
}
wait_for "the failing job in jobs:dead" 60 dead_from_host
host_view=$(dead_from_host)
echo "dead letters seen from the host: $host_view"
py "$JUPYTER_URL" "$JUPYTER_TOKEN" <<'EOF'
import sys, httpx
url, token = sys.argv[1:]
with httpx.Client(timeout=10, trust_env=False) as http:
    status = http.get(f"{url}/api/status", params={"token": token})
    lab = http.get(f"{url}/lab", params={"token": token})
refused = httpx.get(f"{url}/api/status", timeout=10, trust_env=False)  # no token, no cookie
print(f"JupyterLab at {url}: /api/status with the token {status.status_code}, /lab {lab.status_code}, "
      f"without the token {refused.status_code}")
ok = status.status_code == 200 and lab.status_code == 200 and refused.status_code in (401, 403)
sys.exit(0 if ok else 1)
EOF
jupyter_name=$(containers_of "$JUPYTER")
jupyter_view=$(podman exec "$jupyter_name" python -c '
import json, opslib
frame = opslib.dead_letters()
print(json.dumps(sorted(zip(frame["job_id"].astype(str), frame["kind"].astype(str)))))
')
echo "dead letters seen by opslib in $jupyter_name: $jupyter_view"
[[ $jupyter_view == "$host_view" ]] || fail "the jupyter container sees other dead letters than the host"

# ---------------------------------------------------------------------------- 8
grace=$(py <<'EOF'
import yaml
print(yaml.safe_load(open("compose.yaml"))["services"]["worker"]["stop_grace_period"].removesuffix("s"))
EOF
)
step "8. compose stop while 8 jobs of 5 s run: they finish within stop_grace_period (${grace} s)"
"$PY" -c 'import httpx, sys; httpx.post(sys.argv[1] + "/_stand-in/slow-next", json={"count": 8, "seconds": 5}, trust_env=False).raise_for_status()' "$MAIL_URL"
py "$MAIL_KIND" "$MAIL_TEMPLATE" <<'EOF'
import os, sys, redis
from worker.store.enqueue import enqueue
client = redis.Redis.from_url(os.environ["REDIS_URL"])
for i in range(8):
    enqueue(client, sys.argv[1], {"email": f"late{i}@example.test", "template": sys.argv[2], "order_id": str(20_000 + i)},
            prefix=os.environ["QUEUE_PREFIX"])
EOF
"$PY" scripts/queue_probe.py wait-pending 8 --timeout 30 || fail "the slow jobs did not start"
# podman-compose 1.0.3 does not read stop_grace_period (podman's default is 10 s): pass it.
started=$SECONDS
quietly stop -t "$grace"
took=$((SECONDS - started))
for name in "${workers[@]}"; do
    code=$(podman inspect --format '{{.State.ExitCode}}' "$name")
    podman logs "$name" 2>&1 | grep -o '"Waiting up to [^"]*"' | sed "s/^/$name: /" || true
    [[ $code == 0 ]] || { podman logs --tail 20 "$name" >&2; fail "$name exited $code (137: killed before its jobs finished)"; }
    ! podman logs "$name" 2>&1 | grep -q 'did not finish within SHUTDOWN_GRACE_S' || fail "$name left jobs unfinished"
done
echo "compose stop took $took s; both workers exited 0"
((took < grace)) || fail "compose stop took $took s, not within stop_grace_period ${grace} s"
total=0
for name in "${workers[@]}"; do total=$((total + $(succeeded "$name"))); done
((total == 209)) || fail "the replicas ran $total $MAIL_KIND jobs in all, expected 201 + 8"
quietly start redis
wait_services redis
"$PY" scripts/queue_probe.py wait-drained --timeout 10 || fail "jobs were left pending after compose stop"

# ---------------------------------------------------------------------------- 9
step "9. compose down -v: no container, volume or network left"
quietly down -v
left=$(leftovers)
[[ -z $left ]] || fail "compose down -v left: $left"
[[ $(podman network ls --format '{{.Name}}' | sort) == "$networks_before" ]] || fail "the networks changed"
UP=0
echo "nothing left of project $PROJECT; networks as before: $(echo $networks_before)"
