# Sourced by scripts/container-test.sh and scripts/compose-test.sh: the tools and the
# offline base image both tests build on. Needs ROOT, WORK, BASE_IMAGE, and step/fail.
export CONTAINERS_CONF=$ROOT/deploy/containers.conf

# podman, runc, debootstrap and the given extra Debian packages (apt-get, as root); podman's
# settings from deploy/containers.conf, checked against this shell's hard limits.
ensure_container_tools() {
    [[ $(id -u) -eq 0 ]] || fail "run as root: debootstrap, podman import and apt-get need it"
    local missing=() tool
    for tool in podman:podman runc:runc debootstrap:debootstrap "$@"; do
        command -v "${tool%%:*}" >/dev/null || missing+=("${tool##*:}")
    done
    if ((${#missing[@]})); then
        echo "installing ${missing[*]} with apt-get"
        apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null ||
            { apt-get update -qq && apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null; }
    fi
    podman --version
    local nofile nproc
    nofile=$(sed -n 's/.*"nofile=\([0-9]*\):.*/\1/p' "$CONTAINERS_CONF")
    nproc=$(sed -n 's/.*"nproc=\([0-9]*\):.*/\1/p' "$CONTAINERS_CONF")
    (($(ulimit -Hn) >= nofile)) || fail "containers.conf asks nofile=$nofile, above this shell's hard limit $(ulimit -Hn)"
    (($(ulimit -Hu) >= nproc)) || fail "containers.conf asks nproc=$nproc, above this shell's hard limit $(ulimit -Hu)"
    echo "ulimits nofile=$nofile nproc=$nproc are within the hard limits ($(ulimit -Hn), $(ulimit -Hu)); runtime runc"
}

# BASE_IMAGE made with debootstrap and `podman import` (about a minute), kept between runs
# (REBUILD_BASE=1 makes it again).
ensure_base_image() {
    if [[ ${REBUILD_BASE:-0} != 1 ]] && podman image exists "$BASE_IMAGE"; then
        echo "kept from an earlier run (REBUILD_BASE=1 makes it again)"
    else
        debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
            bookworm "$WORK/rootfs" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" >"$WORK/debootstrap.log" ||
            { tail -20 "$WORK/debootstrap.log" >&2; fail "debootstrap failed"; }
        rm -rf "$WORK"/rootfs/var/cache/apt/archives/*.deb "$WORK"/rootfs/var/lib/apt/lists/*
        tar -C "$WORK/rootfs" -c . | podman import --quiet - "$BASE_IMAGE" >/dev/null
        rm -rf "$WORK/rootfs"
    fi
    podman image ls --format '{{.Repository}}:{{.Tag}} {{.ID}} {{.Size}}' "$BASE_IMAGE"
}
