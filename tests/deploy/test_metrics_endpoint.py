"""The /metrics endpoint: loopback by default, a few threads whatever the connections, bounded waits."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator

import httpx
import psutil
from prometheus_client import CollectorRegistry, Counter

from tests.deploy.test_metrics import scrape
from tests.helpers import Workers, wait_for
from worker.embedded.servers import free_port
from worker.observability.endpoint import MetricsEndpoint

IDLE_CONNECTIONS = 300


@contextlib.contextmanager
def idle_connections(port: int, count: int) -> Iterator[list[socket.socket]]:
    """``count`` connections to 127.0.0.1:``port`` that never send a byte."""
    socks = []
    try:
        for _ in range(count):
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        yield socks
    finally:
        for s in socks:
            s.close()


def test_300_idle_connections_cost_no_thread_and_delay_no_scrape(workers: Workers) -> None:
    port = free_port()
    proc = workers.start("tests.deploy.kinds_metrics", METRICS_PORT=str(port), METRICS_INTERVAL_S="0.2")
    wait_for(lambda: scrape(port), timeout_s=30, what="the worker's /metrics to answer")
    process = psutil.Process(proc.pid)
    # METRICS_HOST unset: the endpoint listens on loopback only.
    listening = [c.laddr for c in process.net_connections("tcp") if c.status == psutil.CONN_LISTEN]
    assert [(a.ip, a.port) for a in listening if a.port == port] == [("127.0.0.1", port)]
    before = process.num_threads()
    with idle_connections(port, IDLE_CONNECTIONS):
        wait_for(
            lambda: sum(1 for c in process.net_connections("tcp") if c.laddr.port == port) > IDLE_CONNECTIONS,
            timeout_s=30,
            what="the worker to accept every idle connection",
        )
        started = time.perf_counter()
        answer = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10, trust_env=False)
        took_s = time.perf_counter() - started
        threads = process.num_threads()
    print(
        f"threads: {before} before, {threads} with {IDLE_CONNECTIONS} idle connections; scrape {took_s * 1000:.0f} ms"
    )
    assert answer.status_code == 200
    assert "worker_jobs" in answer.text  # METRICS_NAMESPACE's default
    assert threads < 60
    assert took_s < 1.0


def test_an_idle_connection_is_closed_and_a_slow_request_times_out() -> None:
    registry = CollectorRegistry()
    Counter("probe", "A counter to serve.", registry=registry).inc()
    endpoint = MetricsEndpoint(registry, "127.0.0.1", 0, idle_timeout_s=0.5, read_timeout_s=0.5, max_connections=4)
    endpoint.start()
    try:
        port = endpoint.address[1]
        with idle_connections(port, 1) as [idle]:
            assert idle.recv(1) == b""  # closed by the server after idle_timeout_s (recv's timeout: 5 s)
        with idle_connections(port, 1) as [slow]:
            slow.sendall(b"GET /metrics HTTP/1.1\r\n")  # and never the end of the head
            assert slow.recv(1) == b""  # the worker thread gave up after read_timeout_s
        with idle_connections(port, 6) as crowd:
            assert crowd[0].recv(1) == b""  # past max_connections the oldest idle one goes
        answer = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5, trust_env=False)
        assert "probe_total 1.0" in answer.text
        assert httpx.post(f"http://127.0.0.1:{port}/metrics", timeout=5, trust_env=False).status_code == 405
    finally:
        endpoint.close()


def test_a_connection_dropped_to_admit_a_new_one_is_not_handed_over_in_the_same_batch() -> None:
    """One select can report the listener (a new client, past max_connections: the oldest idle connection is
    dropped) and that oldest connection (its request began) together. Driven by hand, without the watcher
    thread, listener first: the dropped connection is skipped, and the endpoint goes on serving."""
    registry = CollectorRegistry()
    Counter("probe", "A counter to serve.", registry=registry).inc()
    endpoint = MetricsEndpoint(registry, "127.0.0.1", 0, max_connections=1)
    try:
        with socket.create_connection(endpoint.address, timeout=5) as oldest:
            wait_for(lambda: endpoint._accept() or endpoint.idle, 5, "the first connection to be accepted")
            oldest.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
            with socket.create_connection(endpoint.address, timeout=5) as newer:
                ready: list[tuple[object, int]] = []

                def both_ready() -> bool:
                    ready[:] = endpoint.selector.select(timeout=0.1)
                    return len(ready) == 2

                wait_for(both_ready, 5, "the listener and the oldest connection to be ready together")
                ready.sort(key=lambda item: item[0].fileobj is not endpoint.listener)  # type: ignore[attr-defined]
                endpoint._serve(ready)  # type: ignore[arg-type]
                with contextlib.suppress(ConnectionResetError):  # closed with its request unread: a reset
                    assert oldest.recv(1) == b""  # dropped to admit the newer one, never answered
                assert list(endpoint.idle) and newer.fileno() != -1
                endpoint.start()
                newer.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
                assert b"probe_total 1.0" in newer.recv(65536) + newer.recv(65536)
    finally:
        endpoint.close()
