# Stagedoor's worker as a container: `python -m worker`, configured by environment
# variables (`python -m worker --help` lists them), stopped cleanly by SIGTERM.
#
#   docker build -t stagedoor-worker .                       # the worker (last stage)
#   docker build --target notebook -t stagedoor-notebook .   # JupyterLab for compose.yaml
#   docker build --target standins -t stagedoor-standins .   # the mail and Payrail stand-ins (development)
#
# BASE is any Debian-like image with python3 >= 3.11 and `python3 -m venv`: by default
# the official slim image, pinned by digest with its tag beside it (the tag says what it
# is, the digest decides what is pulled; docs/operations.md, "Production checklist",
# says how to move the pin). scripts/container-test.sh builds offline on one made with
# debootstrap. PIP_CERT (unset by default) names a CA bundle for pip where a proxy needs
# one: mount the file at build time, it is never stored in the image:
#   podman build -v /etc/ssl/certs/ca-certificates.crt:/run/host-ca.crt:ro \
#     --build-arg PIP_CERT=/run/host-ca.crt ...
ARG BASE=python:3.11.10-slim-bookworm@sha256:5148c0e4bbb64271bca1d3322360ebf4bfb7564507ae32dd639322e4952a6b16

# ---------------------------------------------------------------- build: the venvs
FROM ${BASE} AS build
ARG PIP_CERT
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore \
    UV_NO_CACHE=1
WORKDIR /src
# uv itself is checked against the sha256 of its wheels (deploy/uv-requirements.txt); it then
# exports uv.lock's pins (with hashes) and installs them; the venvs get no pip of their own.
COPY deploy/uv-requirements.txt /opt/uv-requirements.txt
RUN python3 -m venv /opt/uv \
    && /opt/uv/bin/pip install --quiet --require-hashes --only-binary :all: \
        --requirement /opt/uv-requirements.txt \
    && python3 -m venv --without-pip /opt/venv \
    && python3 -m venv --without-pip /opt/notebook-venv
COPY pyproject.toml uv.lock ./
# The worker image: the core and the stagedoor extra only (no pandas, widgets nor embedded servers);
# the notebook image: the notebook extra (opslib and JupyterLab).
RUN /opt/uv/bin/uv export --frozen --no-dev --extra stagedoor --no-emit-project --no-header --output-file runtime.txt \
    && /opt/uv/bin/uv export --frozen --no-dev --extra notebook --extra stagedoor --no-emit-project --no-header \
        --output-file notebook.txt
# uv reads a CA bundle from SSL_CERT_FILE: PIP_CERT's, when given.
RUN if [ -n "${PIP_CERT:-}" ]; then export SSL_CERT_FILE="$PIP_CERT"; fi \
    && /opt/uv/bin/uv pip install --quiet --python /opt/venv/bin/python --compile-bytecode \
        --require-hashes --no-deps --requirement runtime.txt
COPY README.md ./
COPY worker ./worker
# pyproject.toml leaves the demo night and the stand-ins (development tools) out of the package;
# opslib is copied for the notebook image only, so the worker's package has none of it.
COPY stagedoor ./stagedoor
RUN if [ -n "${PIP_CERT:-}" ]; then export SSL_CERT_FILE="$PIP_CERT"; fi \
    && /opt/uv/bin/uv pip install --quiet --python /opt/venv/bin/python --compile-bytecode --no-deps .

# ----------------------------------------------- notebook: JupyterLab on the same stack
FROM build AS notebook-build
ARG PIP_CERT
COPY opslib ./opslib
RUN if [ -n "${PIP_CERT:-}" ]; then export SSL_CERT_FILE="$PIP_CERT"; fi \
    && /opt/uv/bin/uv pip install --quiet --python /opt/notebook-venv/bin/python --compile-bytecode \
        --require-hashes --no-deps --requirement notebook.txt \
    && /opt/uv/bin/uv pip install --quiet --python /opt/notebook-venv/bin/python --compile-bytecode --no-deps .

FROM ${BASE} AS notebook
RUN groupadd --gid 10002 analyst \
    && useradd --create-home --uid 10002 --gid 10002 --shell /usr/sbin/nologin analyst
COPY --from=notebook-build /opt/notebook-venv /opt/notebook-venv
ENV PATH=/opt/notebook-venv/bin:$PATH \
    PYTHONUNBUFFERED=1
USER 10002:10002
WORKDIR /home/analyst/notebooks
EXPOSE 8888
# The token comes from JUPYTER_TOKEN in the environment (compose.yaml sets it).
CMD ["jupyter", "lab", "--ip=0.0.0.0", "--port=8888", "--no-browser"]

# ------------------------------- standins: the third parties' stand-ins, for compose.yaml
# Development tools (standard library only), in an image of their own: the worker image has none.
FROM ${BASE} AS standins
COPY stagedoor/__init__.py /opt/standins/stagedoor/__init__.py
COPY stagedoor/standins /opt/standins/stagedoor/standins
ENV PYTHONPATH=/opt/standins \
    PYTHONUNBUFFERED=1
USER 65534:65534
ENTRYPOINT ["python3", "-m", "stagedoor.standins"]

# ------------------------------------------------------------- worker (the default)
FROM ${BASE} AS worker
RUN groupadd --gid 10001 stagedoor \
    && useradd --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin stagedoor
COPY --from=build /opt/venv /opt/venv
# METRICS_PORT 9108 serves /metrics, named stagedoor_* (deploy/alerts.yml), on every address of
# the container (METRICS_HOST; outside a container the default is 127.0.0.1); LOG_FORMAT json
# writes one JSON object per line. The image has no embedded servers: without a server URL
# (REDIS_URL, DATABASE_URL, or their _FILE forms) the worker exits 2 with one line.
# WORKER_KINDS: the image runs Stagedoor's jobs; mount other modules and set it to run yours.
# WORKER_QUEUES: Stagedoor's queues (emails in critical, renders in default, reconciliation and purges in bulk).
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    WORKER_KINDS=stagedoor.kinds \
    WORKER_QUEUES=critical:6,default:3,bulk:1 \
    METRICS_PORT=9108 \
    METRICS_HOST=0.0.0.0 \
    METRICS_NAMESPACE=stagedoor \
    LOG_FORMAT=json \
    WORKER_DATA_DIR=/tmp/stagedoor
USER 10001:10001
WORKDIR /tmp
EXPOSE 9108
STOPSIGNAL SIGTERM
# Healthy: Redis answers, the consumer group exists, this container's worker has a fresh
# heartbeat (the worker is PID 1: its name is <hostname>-1 unless WORKER_NAME is set).
HEALTHCHECK --interval=15s --timeout=10s --start-period=30s --retries=3 \
    CMD ["python", "-m", "worker", "health"]
ENTRYPOINT ["python", "-m", "worker"]
