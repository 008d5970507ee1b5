"""Debian 12's podman-compose (1.0.3) with ``network_mode: host`` kept to the host network.

``make compose-test`` runs every service with ``network_mode: host``. podman-compose 1.0.3
also creates the project's default network (a bridge on a private address range) and
adds ``--net <project>_default`` to every container, whatever its ``network_mode``; later
releases leave a container with a ``network_mode`` off the project's networks. This runs
1.0.3 with that behaviour, and one more thing host networking needs: on the host network
podman gives every container the machine's hostname, so the two worker replicas would
share one consumer name (``<hostname>-1``); each container without a ``hostname`` gets its
own name as hostname, as each gets a hostname of its own on a compose network.

    /usr/bin/python3 deploy/compose-test/podman_compose_host.py [podman-compose arguments]
"""

from __future__ import annotations

import podman_compose  # Debian's package (/usr/lib/python3/dist-packages)

original_assert_cnt_nets = podman_compose.assert_cnt_nets
original_get_net_args = podman_compose.get_net_args


def assert_cnt_nets(compose, cnt):  # type: ignore[no-untyped-def]
    if cnt.get("network_mode"):
        return
    original_assert_cnt_nets(compose, cnt)


def get_net_args(compose, cnt):  # type: ignore[no-untyped-def]
    if cnt.get("network_mode") == "host":
        return [] if cnt.get("hostname") else ["--hostname", cnt["name"].replace("_", "-")]
    if cnt.get("network_mode"):
        return []
    return original_get_net_args(compose, cnt)


if __name__ == "__main__":
    if podman_compose.__version__ != "1.0.3":
        raise SystemExit(f"written for podman-compose 1.0.3, found {podman_compose.__version__}")
    podman_compose.assert_cnt_nets = assert_cnt_nets
    podman_compose.get_net_args = get_net_args
    podman_compose.main()
