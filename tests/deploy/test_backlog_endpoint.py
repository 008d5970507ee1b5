"""``python -m worker metrics``: the backlog gauges without job kinds or a worker, what the scaler reads
(also at zero replicas), a 0 for each queue WORKER_QUEUES names though unused, stopped by SIGTERM with
exit 0; without a port or Redis, one line and exit 2."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from functools import partial
from pathlib import Path

import redis

from tests.deploy.test_metrics import sample, scrape
from tests.helpers import ROOT, wait_for
from worker.embedded.servers import free_port
from worker.store.keys import GROUP, Keys


def start(env: dict[str, str], log_path: Path) -> subprocess.Popen[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("WORKER_KINDS", "DATABASE_URL", "ARCHIVE_URL")}
    with open(log_path, "w") as log_file:
        return subprocess.Popen(
            [sys.executable, "-m", "worker", "metrics"],
            cwd=ROOT,
            env={**clean, "PYTHONPATH": str(ROOT), **env},
            stdout=log_file,
            stderr=subprocess.STDOUT,
            text=True,
        )


def test_the_endpoint_serves_the_backlog_with_no_worker_running(
    r: redis.Redis, keys: Keys, redis_url: str, tmp_path: Path
) -> None:
    r.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)
    for n in range(5):
        r.xadd(keys.jobs, {"kind": "greet", "job_id": f"j{n}", "attempts": "0"})
    r.xreadgroup(GROUP, "gone-worker", {keys.jobs: ">"}, count=2)
    port = free_port()
    env = {"REDIS_URL": redis_url, "QUEUE_PREFIX": keys.prefix, "METRICS_PORT": str(port), "METRICS_NAMESPACE": "sd"}
    env["WORKER_QUEUES"] = "critical,default"  # critical never used: its 0 must be there for its scaler
    proc = start(env, tmp_path / "metrics.log")
    try:
        samples = wait_for(partial(scrape, port), timeout_s=30, what="python -m worker metrics to answer")
        assert sample(samples, "sd_backlog", queue="default", partition="0") == 3  # type: ignore[arg-type]
        assert sample(samples, "sd_running", queue="default", partition="0") == 2  # type: ignore[arg-type]
        assert sample(samples, "sd_backlog", queue="critical", partition="0") == 0  # type: ignore[arg-type]
        assert sample(samples, "sd_running", queue="critical", partition="0") == 0  # type: ignore[arg-type]
        r.xadd(keys.jobs, {"kind": "greet", "job_id": "j5", "attempts": "0"})
        assert sample(scrape(port), "sd_backlog", queue="default", partition="0") == 4  # read at each scrape
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
    log = (tmp_path / "metrics.log").read_text()
    assert code == 0, log
    assert "Serving the backlog gauges on http://127.0.0.1:" in log


def test_without_a_port_or_redis_it_says_what_to_set(redis_url: str, tmp_path: Path) -> None:
    for env, expected in (
        ({"REDIS_URL": redis_url}, "error: python -m worker metrics needs METRICS_PORT"),
        ({"METRICS_PORT": str(free_port()), "ARCHIVE_URL": "off"}, "error: python -m worker metrics needs REDIS_URL"),
    ):
        proc = start({"REDIS_URL": "", "METRICS_PORT": "0", **env}, tmp_path / "refused.log")
        assert proc.wait(30) == 2
        assert (tmp_path / "refused.log").read_text().strip().startswith(expected)
