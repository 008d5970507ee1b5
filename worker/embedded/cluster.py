"""A Redis Cluster on loopback from the embedded valkey-server, for tests, benchmarks and trials.

:func:`start_cluster` starts N primaries (and, if asked, one replica each)
with ``--cluster-enabled yes``, deals the 16384 slots out in N equal ranges
(``CLUSTER ADDSLOTSRANGE`` on each primary, ``CLUSTER SET-CONFIG-EPOCH``),
joins them with ``CLUSTER MEET`` and waits for ``cluster_state:ok`` with a
deadline; replicas join and ``CLUSTER REPLICATE`` their primary. Only redis-py
is used (no redis-cli). Each node has a folder of its own and dies with the
process that started it (the parent-death signal of :mod:`worker.embedded.servers`).

Node ports stay below 55535: the cluster bus listens on port + 10000, which
must exist and be free too.
"""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import redis

from worker.embedded.servers import EmbeddedServer, EmbeddedServerError, start_redis

SLOTS = 16384
#: Node ports are drawn from this range; the bus port (port + 10000) must be free as well.
PORT_RANGE = (20000, 45000)


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cluster_port(taken: set[int]) -> int:
    """A port P below 55535 where both P and the bus port P + 10000 are free on 127.0.0.1."""
    rng = random.Random()
    for _ in range(500):
        port = rng.randrange(*PORT_RANGE)
        if port not in taken and port + 10000 not in taken and _free(port) and _free(port + 10000):
            return port
    raise EmbeddedServerError("found no free pair of ports (P, P + 10000) for a cluster node")


@dataclass
class ClusterNodeProcess:
    """One node: its server process, port and cluster node id."""

    server: EmbeddedServer
    port: int
    folder: Path
    node_timeout_ms: int
    node_id: str = ""

    @property
    def pid(self) -> int:
        return self.server.process.pid

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

    def restart(self) -> None:
        """Start the node again after it stopped or was killed, on its port and with its cluster
        config: it rejoins the cluster (as a replica, once its replica was promoted meanwhile)."""
        self.server = start_redis(self.folder, port=self.port, extra_args=_node_args(self.folder, self.node_timeout_ms))


@dataclass
class LocalCluster:
    """A running loopback cluster: its primaries (in slot order) and their replicas."""

    primaries: list[ClusterNodeProcess]
    replicas: list[ClusterNodeProcess] = field(default_factory=list)

    @property
    def url(self) -> str:
        """A URL naming the first node; any node works for a cluster client."""
        return f"redis://127.0.0.1:{self.primaries[0].port}/0"

    @property
    def nodes(self) -> list[ClusterNodeProcess]:
        return [*self.primaries, *self.replicas]

    def stop(self) -> None:
        for node in self.nodes:
            node.server.stop()

    def wait_ok(self, timeout_s: float = 30.0) -> None:
        """Wait until every live node reports ``cluster_state:ok`` and agrees that all slots are served."""
        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            states: list[str] = []
            for node in self.nodes:
                if node.server.process.poll() is not None:
                    continue
                try:
                    with node.client() as c:
                        info = c.cluster("info")
                except redis.RedisError as exc:
                    states.append(str(exc))
                    continue
                ok = info.get("cluster_state") == "ok" and int(info.get("cluster_slots_ok", 0)) == SLOTS
                states.append("ok" if ok else f"{node.port}: {info.get('cluster_state')}")
            if states and all(s == "ok" for s in states):
                return
            last = ", ".join(s for s in states if s != "ok")
            time.sleep(0.05)
        raise EmbeddedServerError(f"the cluster did not reach cluster_state:ok within {timeout_s} s ({last})")

    def wait_replicas_linked(self, timeout_s: float = 30.0) -> None:
        """Wait until every live replica's link to its primary is up (its first sync is done)."""
        deadline = time.monotonic() + timeout_s
        for node in self.replicas:
            if node.server.process.poll() is not None:
                continue
            with node.client() as c:
                while c.info("replication").get("master_link_status") != "up":
                    if time.monotonic() > deadline:
                        raise EmbeddedServerError(f"replica on port {node.port} did not sync within {timeout_s} s")
                    time.sleep(0.05)


def _node_args(folder: Path, node_timeout_ms: int) -> tuple[str, ...]:
    return (
        "--cluster-enabled", "yes",
        "--cluster-config-file", str(folder / "nodes.conf"),
        "--cluster-node-timeout", str(node_timeout_ms),
        # A replica may be promoted however long it was cut off (loopback tests kill primaries).
        "--cluster-replica-validity-factor", "0",
    )  # fmt: skip


def _start_node(folder: Path, taken: set[int], node_timeout_ms: int) -> ClusterNodeProcess:
    folder = folder.resolve()
    folder.mkdir(parents=True, exist_ok=True)
    port = cluster_port(taken)
    taken.update((port, port + 10000))
    server = start_redis(folder, port=port, extra_args=_node_args(folder, node_timeout_ms))
    node = ClusterNodeProcess(server, port, folder, node_timeout_ms)
    with node.client() as c:
        node.node_id = c.execute_command("CLUSTER MYID").decode()
    return node


def start_cluster(
    data_dir: Path, *, primaries: int = 3, replicas: bool = False, node_timeout_ms: int = 2000
) -> LocalCluster:
    """Start and form a cluster of ``primaries`` nodes (each with one replica when ``replicas``)."""
    taken: set[int] = set()
    cluster = LocalCluster([])
    try:
        for i in range(primaries):
            cluster.primaries.append(_start_node(data_dir / f"primary-{i}", taken, node_timeout_ms))
        for i, node in enumerate(cluster.primaries):
            low, high = i * SLOTS // primaries, (i + 1) * SLOTS // primaries - 1
            with node.client() as c:
                c.execute_command("CLUSTER ADDSLOTSRANGE", low, high)
                c.execute_command("CLUSTER SET-CONFIG-EPOCH", i + 1)
        first = cluster.primaries[0]
        with first.client() as c:
            for node in cluster.primaries[1:]:
                c.execute_command("CLUSTER MEET", "127.0.0.1", node.port)
        if replicas:
            for i, primary in enumerate(cluster.primaries):
                replica = _start_node(data_dir / f"replica-{i}", taken, node_timeout_ms)
                cluster.replicas.append(replica)
                with replica.client() as c:
                    c.execute_command("CLUSTER MEET", "127.0.0.1", first.port)
                    _replicate(c, primary.node_id)
        cluster.wait_ok()
        cluster.wait_replicas_linked()
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _replicate(client: redis.Redis, primary_id: str, timeout_s: float = 30.0) -> None:
    """``CLUSTER REPLICATE`` once this node has learnt of the primary (gossip takes a moment)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            client.execute_command("CLUSTER REPLICATE", primary_id)
            return
        except redis.ResponseError as exc:
            if time.monotonic() > deadline:
                raise EmbeddedServerError(f"a replica could not follow primary {primary_id}: {exc}") from None
            time.sleep(0.05)


@contextmanager
def local_cluster(data_dir: Path, **kwargs: object) -> Iterator[LocalCluster]:
    """:func:`start_cluster`, stopped afterwards."""
    cluster = start_cluster(data_dir, **kwargs)  # type: ignore[arg-type]
    try:
        yield cluster
    finally:
        cluster.stop()
