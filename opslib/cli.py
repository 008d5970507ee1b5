"""``python -m opslib``: the queue's state and replays from a terminal.

Commands::

    stats                                  stream length, lag, pending, delayed, dead, consumers
    dead [--kind K] [--since T] [--limit N] [--json | --csv]
    groups [--kind K]                      dead letters grouped by error signature
    pending [--kind K]
    replay ID ...                          replay these dead entries
    replay --kind K [--signature S | --error-contains T] [--since T] [--dry-run] [--yes]
    status BATCH [--wait SECONDS]          what became of a replay batch
    discard ID ... --reason TEXT           take these dead entries out for good, saying why
    discard --kind K [--signature S | --error-contains T] [--since T] --reason TEXT [--dry-run] [--yes]

A replay or a discard first shows what it would take (the dry run), then
asks for confirmation on a terminal; ``--yes`` skips the question,
``--dry-run`` stops after showing. Without a terminal and without ``--yes``
it refuses. Both take ids that ``jobs:dead`` no longer holds from the archive.

Exit codes: 0 done (a replay or discard whose ids were already gone is done:
they are listed as missing); 1 opslib could not do it (server unreachable,
permission refused, unknown kind, malformed id or signature: the message says
which); 2 bad command line (a discard without --reason); 3 not confirmed
(declined, or no terminal and no ``--yes``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TextIO

import pandas as pd

from opslib.discard import discard, discard_kind
from opslib.errors import OpslibError
from opslib.queries import dead_letters, failure_groups, pending, queue_stats
from opslib.replay import replay, replay_kind, replay_status

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOT_CONFIRMED = 0, 1, 2, 3
SHOWN = 20
"""A replay or discard lists at most this many of the entries it will take before asking."""
EXIT_CODES = """exit codes:
  0  done (ids already gone are listed as missing, not an error)
  1  opslib could not do it: server unreachable, permission refused, unknown kind,
     malformed id or signature (the message says which)
  2  bad command line (e.g. a discard without --reason)
  3  replay or discard not confirmed (declined, or no terminal and no --yes)"""
DEAD_SUMMARY = ["dead_at", "kind", "job_id", "outbox_id", "attempts", "reason", "error"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m opslib",
        description="The job queue's state and dead-letter replays (opslib).",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("stats", help="stream length, lag, pending, delayed, dead, consumers")
    dead = sub.add_parser("dead", help="list dead letters")
    dead.add_argument("--kind")
    dead.add_argument("--since", help="ISO time (UTC unless it has an offset)")
    dead.add_argument("--limit", type=int, help="only the most recent N")
    fmt = dead.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="every column, one JSON object per line")
    fmt.add_argument("--csv", action="store_true", help="every column, CSV")
    groups = sub.add_parser("groups", help="dead letters grouped by error signature")
    groups.add_argument("--kind")
    pend = sub.add_parser("pending", help="entries delivered and not acknowledged")
    pend.add_argument("--kind")
    rep = sub.add_parser("replay", help="put dead letters back on the queue")
    _selection(rep, "replay")
    dis = sub.add_parser("discard", help="take dead letters out for good, with a reason (kept in the archive)")
    _selection(dis, "discard")
    dis.add_argument("--reason", help="why these jobs must never run (required; kept with who discarded them)")
    dis.add_argument("--by", help="who discards them (default: the operating-system user)")
    status = sub.add_parser("status", help="what became of a replay batch")
    status.add_argument("batch")
    status.add_argument("--wait", type=float, metavar="SECONDS", help="wait until every job has an outcome")
    return parser


def _selection(command: argparse.ArgumentParser, verb: str) -> None:
    """The arguments that choose the dead letters a replay or a discard takes."""
    command.add_argument("ids", nargs="*", metavar="ID", help="dead entry ids (or use --kind)")
    command.add_argument("--kind", help=f"{verb} every dead letter of this kind (with the filters below)")
    which = command.add_mutually_exclusive_group()
    which.add_argument("--signature", help="only this failure group (a signature from `groups`)")
    which.add_argument("--error-contains", help="only errors containing this text")
    command.add_argument("--since", help="only entries dead at or after this ISO time")
    command.add_argument("--dry-run", action="store_true", help=f"show what would be {verb}ed and stop")
    command.add_argument("--yes", action="store_true", help="do not ask for confirmation")


def table(frame: pd.DataFrame, out: TextIO, width: int = 60) -> None:
    """A frame as a plain-text table, long text cut to ``width`` characters."""
    if frame.empty:
        print("(none)", file=out)
        return
    shown = frame.copy()
    for name in shown.columns:
        if shown[name].dtype == "str":
            shown[name] = shown[name].str.slice(0, width)
    print(shown.to_string(), file=out)


def cmd_dead(args: argparse.Namespace, out: TextIO) -> int:
    frame = dead_letters(args.kind, since=args.since, limit=args.limit)
    if args.json:
        out.write(frame.reset_index().to_json(orient="records", lines=True, date_format="iso", date_unit="ms"))
    elif args.csv:
        frame.to_csv(out, date_format="%Y-%m-%dT%H:%M:%S.%fZ")
    else:
        table(frame[DEAD_SUMMARY], out, width=90)
    return EXIT_OK


def cmd_replay(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    def run(dry_run: bool) -> pd.DataFrame:
        if args.kind:
            return replay_kind(
                args.kind,
                signature=args.signature,
                error_contains=args.error_contains,
                since=args.since,
                dry_run=dry_run,
            )
        return replay(args.ids, dry_run=dry_run)

    def report(done: pd.DataFrame) -> None:
        counts = done["status"].value_counts()
        batch = done.attrs["batch"]
        print(
            f"replayed {counts.get('replayed', 0)}, missing {counts.get('missing', 0)} "
            f"(taken by someone else since); batch {batch}",
            file=out,
        )
        print(f"follow it with: python -m opslib status {batch} --wait 60", file=out)

    return confirmed_move("replay", run, lambda ids: replay(ids), report, args, out, err, stdin)


def cmd_discard(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    def run(dry_run: bool) -> pd.DataFrame:
        if args.kind:
            return discard_kind(
                args.kind,
                reason=args.reason,
                signature=args.signature,
                error_contains=args.error_contains,
                since=args.since,
                by=args.by,
                dry_run=dry_run,
            )
        return discard(args.ids, reason=args.reason, by=args.by, dry_run=dry_run)

    def report(done: pd.DataFrame) -> None:
        counts = done["status"].value_counts()
        print(
            f"discarded {counts.get('discarded', 0)}, missing {counts.get('missing', 0)} "
            f"(taken by someone else since); batch {done.attrs['batch']}",
            file=out,
        )

    return confirmed_move(
        "discard", run, lambda ids: discard(ids, reason=args.reason, by=args.by), report, args, out, err, stdin
    )


def confirmed_move(
    verb: str,
    plan_or_do: Callable[[bool], pd.DataFrame],
    take: Callable[[list[str]], pd.DataFrame],
    report: Callable[[pd.DataFrame], None],
    args: argparse.Namespace,
    out: TextIO,
    err: TextIO,
    stdin: TextIO,
) -> int:
    """Show what a replay or discard would take (its dry run), ask on a terminal, then take exactly that."""
    plan = plan_or_do(True)
    taken = plan[plan["status"] == f"would {verb}"]
    gone = plan[plan["status"] == "missing"]
    missing = f"; {len(gone)} ids are not in jobs:dead nor dead in the archive (taken already)" if len(gone) else ""
    print(f"would {verb} {len(taken)} dead letters{missing}", file=out)
    shown = taken["dead_id"].head(SHOWN).tolist()
    dead = dead_letters() if shown else pd.DataFrame()
    for dead_id in shown:
        about = f"  {dead.at[dead_id, 'kind']}  {dead.at[dead_id, 'error'][:90]}" if dead_id in dead.index else ""
        print(f"  {dead_id}{about}", file=out)
    if len(taken) > SHOWN:
        print(f"  ... and {len(taken) - SHOWN} more", file=out)
    if args.dry_run or taken.empty:
        return EXIT_OK
    if not args.yes:
        if not stdin.isatty():
            print(f"error: not {verb}ing: no terminal to confirm on; add --yes to {verb} without asking", file=err)
            return EXIT_NOT_CONFIRMED
        print(f"{verb.capitalize()} {len(taken)} dead letters? [y/N] ", end="", file=out, flush=True)
        if stdin.readline().strip().lower() not in ("y", "yes"):
            print(f"not {verb}ed", file=out)
            return EXIT_NOT_CONFIRMED
    report(take(taken["dead_id"].tolist()))
    return EXIT_OK


def main(argv: Sequence[str] | None = None, *, stdin: TextIO | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    out, err = sys.stdout, sys.stderr
    if args.command in ("replay", "discard"):
        verb = args.command
        if bool(args.ids) == bool(args.kind):
            parser.error(f"{verb}: give dead entry ids, or --kind K (with --signature / --error-contains), not both")
        if args.ids and (args.signature or args.error_contains or args.since):
            parser.error(f"{verb}: --signature, --error-contains and --since go with --kind, not with ids")
        if verb == "discard" and not (args.reason or "").strip():
            print(
                "error: discard needs --reason TEXT: say why these jobs must never run "
                "(e.g. --reason 'orders refunded, INC-2211'); nothing was discarded",
                file=err,
            )
            return EXIT_USAGE
    try:
        if args.command == "stats":
            stats = queue_stats()
            table(stats.counts, out)
            print("\nconsumers:", file=out)
            table(stats.consumers, out)
        elif args.command == "dead":
            return cmd_dead(args, out)
        elif args.command == "groups":
            dead = dead_letters(args.kind) if args.kind else None
            table(failure_groups(dead)[["count", "kinds", "signature", "last_seen"]], out, width=100)
        elif args.command == "pending":
            table(pending(args.kind), out)
        elif args.command == "replay":
            return cmd_replay(args, out, err, stdin or sys.stdin)
        elif args.command == "discard":
            return cmd_discard(args, out, err, stdin or sys.stdin)
        elif args.command == "status":
            frame = replay_status(args.batch, wait_s=args.wait)
            print(frame["status"].value_counts().to_string(), file=out)
            table(frame[frame["status"] != "succeeded"].drop(columns=["batch"]), out)
    except OpslibError as exc:
        print(f"error: {exc}", file=err)
        return EXIT_FAILED
    return EXIT_OK
