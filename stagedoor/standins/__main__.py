"""``python -m stagedoor.standins mail|payrail [--port P] [--host H] [--payments FILE]``.

Runs one stand-in on 127.0.0.1 (``--host 0.0.0.0`` in a container) until SIGINT or SIGTERM. ``--payments`` (for
payrail) is a JSON file ``{"YYYY-MM-DD": [payment, ...]}``.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from pathlib import Path

from stagedoor.standins import start_mail, start_payrail
from stagedoor.standins.server import StandIn


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stagedoor.standins", description=__doc__)
    parser.add_argument("service", choices=("mail", "payrail"))
    parser.add_argument("--port", type=int, default=0, help="TCP port (default: a free one)")
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; 0.0.0.0 in a container)"
    )
    parser.add_argument("--payments", type=Path, help="payrail: JSON file {day: [payment, ...]}")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    stand_in: StandIn
    if args.service == "mail":
        stand_in = start_mail(args.port, args.host)
    else:
        payments = json.loads(args.payments.read_text()) if args.payments else None
        stand_in = start_payrail(payments, args.port, args.host)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print(f"{stand_in.name} listening on {stand_in.url}", flush=True)
    stop.wait()
    stand_in.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
