"""The incident desk's commands of ``python -m opslib``: kinds, pause, resume, throttle, actions.

::

    kinds [--json | --csv]                 every known kind: workers, policy, counts, paused, throttle
    pause KIND --reason TEXT [--by NAME] [--dry-run]
                                           stop every worker from starting KIND's jobs (they wait);
                                           --dry-run says what would wait and changes nothing
    resume KIND [--reason TEXT] [--by NAME]
                                           lift the pause; the waiting jobs run, in their order
    throttle KIND N --reason TEXT [--by NAME]
                                           at most N of KIND's jobs start a second, over all workers
    throttle KIND off [--by NAME]          lift opslib's throttle
    actions [--since 2h] [--kind K] [--json | --csv]
                                           every operator action, oldest first, with who and why

Each prints one line saying what it did; bad input (an unknown kind, a rate
that is not a number > 0, a resume of a kind not paused) is one line on
stderr and changes nothing.
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from opslib.actions import actions
from opslib.cli_reads import TIME_HELP, add_format, emit
from opslib.display import frame_text, plural
from opslib.errors import OpslibError
from opslib.kinds import check_kind_known, kinds
from opslib.moves.incident import pause, resume, throttle
from opslib.operator import check_reason

COMMANDS = ("kinds", "pause", "resume", "throttle", "actions")
KINDS_SHOWN = ["workers", "waiting", "running", "delayed", "parked", "dead", "paused", "paused_by", "throttle_per_s"]
ACTIONS_SHOWN = ["at", "by", "action", "kind", "entries", "reason", "batch"]


def add_commands(sub: Any) -> None:
    """Add the incident desk's subcommands to ``python -m opslib``'s parser."""
    add_format(sub.add_parser("kinds", help="every known kind: workers, policy, counts, paused, throttle"))
    held = sub.add_parser("pause", help="stop every worker from starting a kind's jobs (they wait, in order)")
    held.add_argument("kind", metavar="KIND")
    held.add_argument("--reason", help="why the kind must wait (required; shown with the pause)")
    held.add_argument("--dry-run", action="store_true", help="say what would wait; change nothing")
    back = sub.add_parser("resume", help="lift a kind's pause; its waiting jobs run, in order")
    back.add_argument("kind", metavar="KIND")
    back.add_argument("--reason", help="why (optional; kept in the actions)")
    slow = sub.add_parser("throttle", help="at most N of a kind's jobs start a second over all workers; N=off lifts")
    slow.add_argument("kind", metavar="KIND")
    slow.add_argument("rate", metavar="N", help="jobs a second (e.g. 10 or 0.5), or off")
    slow.add_argument("--reason", help="why (required to set a rate)")
    for parser in (held, back, slow):
        parser.add_argument("--by", help="who does it (default: the operating-system user)")
    done = sub.add_parser("actions", help="every operator action, oldest first, with who and why")
    done.add_argument("--since", help=f"from: {TIME_HELP}")
    done.add_argument("--kind")
    add_format(done)


def parse_rate(value: str) -> float | None:
    """``off`` -> None; a number -> float (checked for > 0 by :func:`opslib.throttle`)."""
    if value.strip().lower() == "off":
        return None
    try:
        return float(value)
    except ValueError:
        raise OpslibError(f"throttle rate {value!r} is not a number; give jobs a second (e.g. 10) or off") from None


def would_pause(kind: str, reason: str | None) -> str:
    """What ``pause KIND`` would hold back, read from :func:`kinds` (the same checks as a pause; nothing written)."""
    check_reason(reason, "pause")
    known = kinds()
    if kind not in known.index:
        check_kind_known(kind)  # an unknown kind: one line naming close ones
        return f"would pause {kind}: none of its jobs waits now; nothing changed (drop --dry-run to pause)"
    row = known.loc[kind]
    if bool(row["paused"]):
        return f"{kind} is already paused (by {row['paused_by']}); a pause would change nothing"
    waiting, delayed = int(row["waiting"]), int(row["delayed"])
    least = "at least " if known.attrs["notes"] else ""  # a backlog past opslib's cap: counted in part
    return (
        f"would pause {kind}: its {least}{plural(waiting, 'waiting job')} and {least}{plural(delayed, 'delayed job')} "
        "would wait until resumed; nothing changed (drop --dry-run to pause)"
    )


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run one of :data:`COMMANDS`; raises :class:`OpslibError` on bad input (nothing changed)."""
    if args.command == "kinds":
        frame = kinds()
        emit(frame, args, out, KINDS_SHOWN)
        for note in frame.attrs["notes"]:
            print(f"note: {note}", file=err if args.json or args.csv else out)
    elif args.command == "actions":
        done = actions(since=args.since, kind=args.kind)
        if args.json or args.csv:
            emit(done, args, out)
        else:
            print(frame_text(done[ACTIONS_SHOWN], index=False), file=out)
    elif args.command == "pause" and args.dry_run:
        print(would_pause(args.kind, args.reason), file=out)
    elif args.command == "pause":
        pause(args.kind, reason=args.reason, by=args.by)
        print(f"paused {args.kind}: workers stop starting its jobs within a second; they wait until resumed", file=out)
    elif args.command == "resume":
        done = resume(args.kind, reason=args.reason, by=args.by)
        back = int(done.loc[0, "entries"])
        verb = "is" if back == 1 else "are"
        print(f"resumed {args.kind}: {plural(back, 'waiting job')} {verb} back on the queue", file=out)
    else:
        rate = parse_rate(args.rate)
        throttle(args.kind, rate, reason=args.reason, by=args.by)
        said = "lifted opslib's throttle" if rate is None else f"at most {rate:g} jobs a second start"
        print(f"throttled {args.kind}: {said}", file=out)
    return 0
