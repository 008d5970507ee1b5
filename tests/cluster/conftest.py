"""Fixtures of the cluster suite: one 3-primary Valkey cluster on loopback for the whole session.

The cluster is formed from the embedded valkey-server (``worker.embedded.cluster``)
once per session and shared; each test gets a key prefix of its own, whose
keys are deleted afterwards on every primary (never a flush). The failover
test in ``tests/faults`` forms a cluster of its own, with replicas, because it
kills a primary.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.cluster

from tests.helpers import Workers
from worker.embedded.cluster import LocalCluster, local_cluster


@pytest.fixture(scope="session")
def cluster(tmp_servers_dir: Path) -> Iterator[LocalCluster]:
    """Three primaries, slots dealt out in three equal ranges, cluster_state:ok."""
    with local_cluster(tmp_servers_dir / "cluster", primaries=3) as formed:
        yield formed


@pytest.fixture
def cr(cluster: LocalCluster) -> Iterator[redis.cluster.RedisCluster]:
    """A cluster client (bytes in, bytes out)."""
    client = redis.cluster.RedisCluster.from_url(cluster.url)
    yield client
    client.close()


@pytest.fixture
def node_urls(cluster: LocalCluster) -> list[str]:
    """One URL per primary: a test points different tools at different nodes."""
    return [f"redis://127.0.0.1:{node.port}/0" for node in cluster.primaries]


def _cleanup(client: redis.cluster.RedisCluster, prefix: str) -> None:
    for key in list(client.scan_iter(match=f"{prefix}*", count=1000)):
        client.delete(key)


@pytest.fixture
def tagged_prefix(cr: redis.cluster.RedisCluster) -> Iterator[str]:
    """A prefix with a hash tag of its own: a one-partition queue lives in one slot."""
    value = f"{{test:{uuid.uuid4().hex[:10]}}}:"
    yield value
    _cleanup(cr, value)


@pytest.fixture
def plain_prefix(cr: redis.cluster.RedisCluster) -> Iterator[str]:
    """A prefix without a hash tag, for partitioned queues (each partition brings its tag)."""
    value = f"test:{uuid.uuid4().hex[:10]}:"
    yield value
    _cleanup(cr, value)


@pytest.fixture
def cluster_workers(cluster: LocalCluster, tagged_prefix: str, tmp_path: Path) -> Iterator[Workers]:
    """Worker processes on the cluster (REDIS_URL: the first node) under the test's prefix."""
    pool = Workers(cluster.url, tagged_prefix, tmp_path)
    yield pool
    pool.stop_all()
