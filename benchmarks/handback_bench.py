"""The cost of a hand-back: the move an old worker makes for a payload it cannot run, against a plain ack.

On a dedicated embedded valkey-server (or ``--redis-url``, under a key
prefix of its own, removed afterwards), ``--entries`` version-2 jobs of five
payload fields are read by one consumer, then each is handed back
(``hand_back.lua``: owner check, XACK, XDEL, XADD of the copy), one round trip
after the other, as a worker's slots do; the same number read and
acknowledged one XACK at a time gives the floor. A hand-back also costs the
read of the copy by the next worker, which the read loop batches with others
(not counted here). Each figure is the median of ``--rounds`` rounds. Run:
``.venv/bin/python benchmarks/handback_bench.py``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from worker.embedded.servers import start_redis  # noqa: E402
from worker.store.enqueue import NewJob, enqueue_many  # noqa: E402
from worker.store.keys import GROUP, Keys  # noqa: E402
from worker.store.scripts import Scripts  # noqa: E402

FIELDS = {"to": "ada@example.org", "subject": "Your tickets", "order_id": "4471", "locale": "en", "seats": "F12,F13"}


def one_round(client: redis.Redis, entries: int) -> tuple[float, float]:
    """Microseconds per hand-back and per plain acknowledgement, on a fresh queue each."""
    figures = []
    for move in ("hand_back", "ack"):
        keys = Keys(f"handback-bench:{uuid.uuid4().hex[:8]}:")
        client.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)
        enqueue_many(client, [NewJob("send_email", FIELDS, version=2)] * entries, prefix=keys.prefix)
        read = client.xreadgroup(GROUP, "old-1", {keys.jobs: ">"}, count=entries)[0][1]
        scripts = Scripts(client, keys)
        started = time.perf_counter()
        for entry_id, raw in read:
            if move == "ack":
                client.xack(keys.jobs, GROUP, entry_id)
                continue
            fields = {name.decode(): value.decode() for name, value in raw.items()} | {"handed_back": "1"}
            scripts.hand_back(entry_id.decode(), "old-1", None, fields)
        figures.append((time.perf_counter() - started) / entries * 1e6)
        for key in client.scan_iter(match=f"{keys.prefix}*"):
            client.delete(key)
    return figures[0], figures[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url", help="use this server (under a fresh key prefix) instead of an embedded one")
    parser.add_argument("--entries", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    server = None if args.redis_url else start_redis(Path(tempfile.mkdtemp(prefix="handback-bench-")) / "valkey")
    client = redis.Redis.from_url(args.redis_url or server.url)  # type: ignore[union-attr]
    try:
        figures = [one_round(client, args.entries) for _ in range(args.rounds)]
    finally:
        client.close()
        if server is not None:
            server.stop()
    hand_back, ack = (statistics.median(values) for values in zip(*figures, strict=True))
    print(f"{args.entries:,} entries a round, {args.rounds} rounds, one round trip at a time")
    print(f"{'move':<44}{'median us':>10}{'min':>8}{'max':>8}")
    for name, values in (
        ("hand_back (owner check, XACK, XDEL, XADD)", [f[0] for f in figures]),
        ("XACK alone (a success's floor)", [f[1] for f in figures]),
    ):
        print(f"{name:<44}{statistics.median(values):>10.1f}{min(values):>8.1f}{max(values):>8.1f}")
    print(f"a hand-back costs {hand_back - ack:.1f} us more than an acknowledgement")


if __name__ == "__main__":
    main()
