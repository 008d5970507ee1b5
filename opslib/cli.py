"""``python -m opslib``: the queue's state and replays from a terminal.

Commands::

    stats                                  stream length, lag, pending, delayed, dead, consumers
    dead [--kind K] [--since T] [--until T] [--signature S] [--search TEXT] [--limit N] [--json | --csv]
    groups [--kind K] [--since T] [--json | --csv]
                                           dead letters grouped by error signature
    archive [--kind K] [--since T] [--until T] [--status S] [--signature S] [--search TEXT] [--limit N]
            [--json | --csv]               archived dead letters and what became of them
    history [--kind K] [--since 24h] [--until T] [--freq 1h] [--json | --csv]
                                           dead letters died, replayed, discarded per period
    flow [--kind K] [--since 1h] [--until T] [--freq 1min] [--json | --csv]
                                           jobs succeeded, retried, dead, and their waits per period
    find VALUE [--json | --csv]            where a job is now (job id, entry id, outbox id, trace, payload
                                           value), with the field that matched
    pending [--kind K]
    replay ID ... [--set FIELD=VALUE ...]  replay these dead entries (with those fields set: edit and replay)
    replay --kind K [--signature S | --error-contains T] [--since T] [--set FIELD=VALUE] [--dry-run] [--yes]
    status BATCH [--wait SECONDS] [--json | --csv]
                                           what became of a replay batch
    discard ID ... --reason TEXT           take dead entries out for good, saying why (kept in the archive)
    discard --kind K [--signature S | --error-contains T] [--since T] --reason TEXT [--dry-run] [--yes]
    show ID                                one dead letter whole: fields, error, traceback, archive
    delayed [--kind K]                     the delayed jobs, soonest first
    run-now JOB_ID ... [--dry-run] [--yes] move delayed jobs onto the queue now
    cancel ID ... --reason TEXT [--dry-run] [--yes]
                                           stop running jobs, remove those not started (job or entry ids)
    runbook KIND [--since 2h] [--signature S] [--out DIR]
                                           run the investigate-kind runbook: a notebook and its HTML
    kinds, pause, resume, throttle, actions
                                           the incident desk (see opslib/incident_cli.py)

A replay, discard, run-now or cancel first shows what it would take (the dry
run), then asks for confirmation on a terminal; ``--yes`` skips the question,
``--dry-run`` stops after showing. Without a terminal and without ``--yes`` it
refuses. A replay or discard also takes ids that ``jobs:dead`` no longer holds
from the archive. Times are shown in ``OPSLIB_TZ`` (UTC by default), and a
time typed after ``--since`` / ``--until`` is read in it unless it names a
zone: each command says how it read it (``since 15:46 CET (14:46 UTC)``).

Exit codes: 0 done (a replay or discard whose ids were already gone is done:
they are listed as missing); 1 opslib could not do it, or ``find`` found nothing (server unreachable,
permission refused, unknown kind, malformed id or signature: the message says
which); 2 bad command line (a discard without --reason); 3 a replay, discard,
run-now or cancel not confirmed (declined, or no terminal and no ``--yes``).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import pandas as pd

from opslib import incident_cli
from opslib.cli_moves import add_set_option, cancel_move, confirm_and_move, discard_move, replay_move, run_now_move
from opslib.cli_reads import TIME_HELP, add_format, add_read_commands, echo_window, emit, run_read
from opslib.display import frame_text
from opslib.errors import OpslibError, UnknownKind
from opslib.moves.replay import replay_status
from opslib.queries import delayed, pending, queue_stats
from opslib.runbook import DEFAULT_OUT, RunbookFailed, run_runbook
from opslib.show import show
from worker.printable import printable_stream
from worker.store.vocabulary import (
    STATUS_SUCCEEDED,
)

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOT_CONFIRMED = 0, 1, 2, 3
#: The commands that move entries, through one confirm-and-report path (:mod:`opslib.cli_moves`).
MOVES = ("replay", "discard", "run-now", "cancel")
EXIT_CODES = """exit codes:
  0  done (ids already gone are listed as missing, not an error)
  1  opslib could not do it: server unreachable, permission refused, unknown kind,
     malformed id or signature (the message says which); find: found nowhere
  2  bad command line (e.g. a discard without --reason)
  3  replay, discard, run-now or cancel not confirmed (declined, or no terminal and no --yes)"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m opslib",
        description="The job queue's state and dead-letter replays (opslib).",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("stats", help="stream length, lag, pending, delayed, dead, consumers")
    add_read_commands(sub)
    pend = sub.add_parser("pending", help="entries delivered and not acknowledged")
    pend.add_argument("--kind")
    for verb, helps in (
        ("replay", "put dead letters back on the queue"),
        ("discard", "take dead letters out for good, with a reason (kept in the archive)"),
    ):
        rep = sub.add_parser(verb, help=helps)
        rep.add_argument("ids", nargs="*", metavar="ID", help="dead entry ids (or use --kind)")
        rep.add_argument("--kind", help=f"{verb} every dead letter of this kind (with the filters below)")
        which = rep.add_mutually_exclusive_group()
        which.add_argument("--signature", help="only this failure group (a signature from `groups`)")
        which.add_argument("--error-contains", help="only errors containing this text")
        rep.add_argument("--since", help=f"only entries dead from: {TIME_HELP}")
        if verb == "discard":
            rep.add_argument("--reason", help="why these jobs must never run (required; kept in the archive)")
        else:
            rep.add_argument("--reason", help="why (optional; kept in the operators' actions)")
        rep.add_argument("--by", help=f"who {verb}s them (default: the operating-system user)")
        if verb == "replay":
            add_set_option(rep)
        rep.add_argument("--dry-run", action="store_true", help=f"show what would be {verb}ed and stop")
        rep.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    status = sub.add_parser("status", help="what became of a replay batch")
    status.add_argument("batch")
    status.add_argument("--wait", type=float, metavar="SECONDS", help="wait until every job has an outcome")
    add_format(status)
    one = sub.add_parser("show", help="one dead letter whole: fields, error, traceback, its life in the archive")
    one.add_argument("dead_id", metavar="ID")
    later = sub.add_parser("delayed", help="the delayed jobs, soonest first")
    later.add_argument("--kind")
    for name, helps in (
        ("run-now", "move delayed jobs onto the queue now"),
        ("cancel", "stop running jobs; remove waiting, delayed, throttled, parked or fair ones (recorded: who, why)"),
    ):
        move = sub.add_parser(name, help=helps)
        ids = "job ids or entry ids" if name == "cancel" else "job ids (the job_id column of `delayed`)"
        move.add_argument("job_ids", nargs="+", metavar="ID" if name == "cancel" else "JOB_ID", help=ids)
        if name == "cancel":
            move.add_argument("--reason", required=True, help="why these jobs must stop (kept with who cancelled them)")
        move.add_argument("--dry-run", action="store_true", help="show what would be moved and stop")
        move.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    book = sub.add_parser("runbook", help="run the investigate-kind runbook for KIND: a notebook and its HTML")
    book.add_argument("kind", metavar="KIND")
    book.add_argument("--since", default="24h", help=f"the window, from: {TIME_HELP} (default 24h)")
    book.add_argument("--signature", help="only this failure group (a signature from `groups`)")
    book.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"folder to write into (default {DEFAULT_OUT})")
    incident_cli.add_commands(sub)
    return parser


def table(frame: pd.DataFrame, out: TextIO) -> None:
    """A frame as a plain-text table for a person (:func:`opslib.display.frame_text`)."""
    print(frame_text(frame), file=out)


def cmd_move(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    """``replay``, ``discard``, ``run-now`` and ``cancel``: the dry run, the question, the move, the report."""
    if args.command in ("replay", "discard"):
        move = replay_move(args) if args.command == "replay" else discard_move(args)
    else:
        move = cancel_move(args) if args.command == "cancel" else run_now_move(args)
    done = confirm_and_move(move, args, out, err, stdin)
    if done is None:
        return EXIT_NOT_CONFIRMED
    if args.command == "replay" and len(done):
        print(f"follow it with: python -m opslib status {done.attrs['batch']} --wait 60", file=out)
    return EXIT_OK


def cmd_runbook(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Execute the runbook; print the notebook's and the HTML's paths (also when a cell failed).
    An unknown kind is one line and exit 2: there is nothing to investigate."""
    try:
        run = run_runbook(args.kind, since=args.since, signature=args.signature, out=args.out)
    except UnknownKind as exc:
        print(f"error: {exc}; no runbook was run", file=err)
        return EXIT_USAGE
    except RunbookFailed as exc:
        print(exc.run.notebook, file=out)
        print(exc.run.html, file=out)
        print(f"error: {exc}", file=err)
        return EXIT_FAILED
    print(run.notebook, file=out)
    print(run.html, file=out)
    return EXIT_OK


def main(argv: Sequence[str] | None = None, *, stdin: TextIO | None = None) -> int:
    parser = build_parser()
    out, err = printable_stream(sys.stdout), printable_stream(sys.stderr)  # no raw control reaches the terminal
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):  # argparse's errors quote what was typed
        args = parser.parse_args(argv)
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
        echo_window(args, err)
        read = run_read(args, out, err)
        if read is not None:
            return read
        if args.command == "pending":
            table(pending(args.kind), out)
        elif args.command in MOVES:
            return cmd_move(args, out, err, stdin or sys.stdin)
        elif args.command == "show":
            print(show(args.dead_id), file=out)
        elif args.command == "delayed":
            table(delayed(args.kind).drop(columns=["fields"]), out)
        elif args.command in incident_cli.COMMANDS:
            return incident_cli.run(args, out, err)
        elif args.command == "runbook":
            return cmd_runbook(args, out, err)
        elif args.command == "status":
            frame = replay_status(args.batch, wait_s=args.wait)
            if args.json or args.csv:
                return emit(frame, args, out)
            print(frame["status"].value_counts().to_string(), file=out)
            table(frame[frame["status"] != STATUS_SUCCEEDED].drop(columns=["batch"]), out)
    except OpslibError as exc:
        print(f"error: {exc}", file=err)
        return EXIT_FAILED
    return EXIT_OK
