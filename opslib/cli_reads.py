"""The read commands of ``python -m opslib``: dead letters, failure groups, the archive, its history, the flow,
and where a job is, and a month of the archive exported (:mod:`opslib.cli` holds the rest and the dispatch).

Each table command prints a table for a person, or every column with
``--csv`` / ``--json`` (one JSON object per line). A time typed after
``--since`` / ``--until`` is read in the display zone (``OPSLIB_TZ``) unless
it names its own, and the command first says on stderr how it read it:
``since 15:46 CET (14:46 UTC)``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

import pandas as pd

from opslib.archive import archive, history
from opslib.archive_frames import HISTORY_MEASURES, busy_periods
from opslib.display import as_typed, duration, frame_text, local_time, spreadsheet_safe
from opslib.export import export_month
from opslib.find import DEAD, DELAYED, RUNNING, find
from opslib.flow import throughput
from opslib.queries import dead_letters, failure_groups
from opslib.times import parse_since
from worker.printable import printable
from worker.store.flow import COUNTS

EXIT_OK, EXIT_NOT_FOUND = 0, 1
DEAD_SUMMARY = ["dead_at", "kind", "job_id", "outbox_id", "attempts", "reason", "error"]
ARCHIVE_SUMMARY = ["dead_at", "kind", "job_id", "status", "reason", "error"]
TIME_HELP = (
    "ISO time, duration back (2h), today, yesterday, time of day (9pm, 21:00) or 'yesterday 21:00'; "
    "read in OPSLIB_TZ unless it names a zone"
)


def add_format(parser: argparse.ArgumentParser) -> None:
    fmt = parser.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="every column, one JSON object per line")
    fmt.add_argument("--csv", action="store_true", help="every column, CSV")


def add_all(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--all", action="store_true", help="every period of the window (default: only those where something happened)"
    )


def add_window(parser: argparse.ArgumentParser, since_default: str | None = None) -> None:
    default = f" (default {since_default})" if since_default else ""
    parser.add_argument("--since", default=since_default, help=f"from: {TIME_HELP}{default}")
    parser.add_argument("--until", help=f"before: {TIME_HELP}")


def add_read_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The parsers of the commands in the module docstring."""
    dead = sub.add_parser("dead", help="list dead letters")
    dead.add_argument("--kind")
    add_window(dead)
    dead.add_argument("--signature", help="only this failure group (a signature from `groups`)")
    dead.add_argument("--search", help="only entries whose id, error, traceback, ids or payload contain this text")
    dead.add_argument("--limit", type=int, help="only the most recent N")
    add_format(dead)
    groups = sub.add_parser("groups", help="dead letters grouped by error signature")
    groups.add_argument("--kind")
    groups.add_argument("--since", help=f"only entries dead from: {TIME_HELP}")
    add_format(groups)
    stored = sub.add_parser("archive", help="archived dead letters and what became of them")
    stored.add_argument("--kind")
    add_window(stored)
    stored.add_argument("--status", help="dead, replayed or discarded")
    stored.add_argument("--signature", help="only this failure group")
    stored.add_argument("--search", help="only rows whose id, error, traceback, ids or payload contain this text")
    stored.add_argument("--limit", type=int, help="only the most recent N")
    stored.add_argument("--include-exported", metavar="DIR", help="also the months exported to DIR (`export`)")
    add_format(stored)
    month = sub.add_parser("export", help="one month of the archive to Parquet, with a manifest, verified")
    month.add_argument("--month", required=True, help="YYYY-MM, a UTC month of dead_at")
    month.add_argument("--out", required=True, type=Path, help="the folder to write the file and its manifest into")
    past = sub.add_parser("history", help="dead letters died, replayed, discarded per period and kind (archive)")
    past.add_argument("--kind")
    add_window(past, "24h")
    past.add_argument("--freq", default="1h", help="the period: 15min, 1h, 1D (default 1h)")
    add_all(past)
    add_format(past)
    flow = sub.add_parser("flow", help="jobs succeeded, retried, dead, and their waits per period and kind")
    flow.add_argument("--kind")
    add_window(flow, "1h")
    flow.add_argument("--freq", default="1min", help="the period: 1min, 15min, 1h (default 1min)")
    add_all(flow)
    add_format(flow)
    where = sub.add_parser("find", help="where a job is now, by job id, entry id, outbox id, trace or payload value")
    where.add_argument("value", metavar="VALUE")
    add_format(where)


def echo_window(args: argparse.Namespace, err: TextIO) -> None:
    """Say how ``--since`` / ``--until`` were read: ``since 15:46 CET (14:46 UTC)``."""
    for name in ("since", "until"):
        typed = getattr(args, name, None)
        if typed:
            when = parse_since(typed, name)
            if when is not None:
                print(f"{name} {as_typed(when)}", file=err)


def emit(frame: pd.DataFrame, args: argparse.Namespace, out: TextIO, summary: list[str] | None = None) -> int:
    """``frame`` as JSON lines, CSV (every column, times in UTC) or a table for a person (``summary`` columns)."""
    if args.json:
        out.write(frame.reset_index().to_json(orient="records", lines=True, date_format="iso", date_unit="ms"))
    elif args.csv:
        spreadsheet_safe(frame).to_csv(out, date_format="%Y-%m-%dT%H:%M:%S.%fZ")
    else:
        shown = frame[summary] if summary and not frame.empty else frame
        print(frame_text(shown), file=out)
    return EXIT_OK


def cmd_dead(args: argparse.Namespace, out: TextIO) -> int:
    frame = dead_letters(
        args.kind, since=args.since, until=args.until, signature=args.signature, search=args.search, limit=args.limit
    )
    return emit(frame, args, out, DEAD_SUMMARY)


def cmd_groups(args: argparse.Namespace, out: TextIO) -> int:
    dead = dead_letters(args.kind, since=args.since) if args.kind or args.since else None
    groups = failure_groups(dead)
    return emit(groups, args, out, ["count", "kinds", "signature", "last_seen"])


def cmd_archive(args: argparse.Namespace, out: TextIO) -> int:
    frame = archive(
        args.kind,
        since=args.since,
        until=args.until,
        status=args.status,
        signature=args.signature,
        search=args.search,
        limit=args.limit,
        include_exported=args.include_exported,
    )
    return emit(frame, args, out, ARCHIVE_SUMMARY)


def cmd_export(args: argparse.Namespace, out: TextIO) -> int:
    manifest = export_month(args.month, args.out)
    print(
        f"exported {manifest['rows']:,} rows of {args.month} to {args.out / manifest['file']}, verified "
        f"(sha256 {manifest['sha256'][:16]}...)",
        file=out,
    )
    return EXIT_OK


def cmd_history(args: argparse.Namespace, out: TextIO) -> int:
    frame = history(kind=args.kind, since=args.since, until=args.until, freq=args.freq)
    return emit_periods(frame, HISTORY_MEASURES, args, out)


def cmd_flow(args: argparse.Namespace, out: TextIO) -> int:
    frame = throughput(args.kind, freq=args.freq, since=args.since, until=args.until)
    return emit_periods(frame, COUNTS, args, out)


def emit_periods(frame: pd.DataFrame, measures: Sequence[str], args: argparse.Namespace, out: TextIO) -> int:
    """A per-period frame: only its busy periods unless ``--all``; in a table, then a line saying how many
    periods were quiet and from when nothing was kept ("not kept" in the cells of ``--all``)."""
    busy = busy_periods(frame, measures)
    if args.json or args.csv:
        return emit(frame if args.all else busy, args, out)
    shown = frame if args.all else busy
    missing = shown[list(measures)].isna().any(axis=1)
    if missing.any():
        shown = shown.astype({name: "object" for name in measures})
        shown.loc[missing, list(measures)] = "not kept"
    emit(shown, args, out)
    periods = frame["period"].nunique()
    quiet = periods - busy["period"].nunique()
    if quiet and not args.all:
        print(f"{quiet:,} of {periods:,} periods had nothing in them (not shown; --all shows every period)", file=out)
    kept_from = frame.attrs.get("kept_from")
    if kept_from is not None:
        print(f"periods before {local_time(kept_from)} are not kept (counted as missing, not as 0)", file=out)
    return EXIT_OK


def found_line(row: pd.Series) -> str:
    """One place a job was found, as one line for a terminal (a newline in a value cannot forge another),
    with the field that held the value."""
    matched = f" [matched {row['matched']}]" if row["matched"] else ""
    return printable(_found_sentence(row) + matched)


def _found_sentence(row: pd.Series) -> str:
    job = f"{row['kind'] or '(no kind)'} {row['job_id'] or '(no job id)'}"
    where = row["where"]
    if where == RUNNING:
        return f"running    {job} on {row['worker']}, idle {duration(row['idle'])} (entry {row['id']})"
    if where == DELAYED:
        return f"delayed    {job} until {local_time(row['run_at'])}"
    if where == DEAD:
        return f"dead       {job}: entry {row['id']}, died {local_time(row['at'])}, {row['reason']}: {row['error']}"
    if where == "archived":
        return f"archived   {job}: entry {row['id']}, {row['status']} (died {local_time(row['at'])})"
    return f"{where:<10} {job} (entry {row['id']}, added {local_time(row['at'])})"


def cmd_find(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """One line per place the value was found; one line and exit 1 when it is nowhere."""
    frame = find(args.value)
    for note in frame.attrs.get("notes", []):
        print(f"note: {note}", file=err)
    if args.json or args.csv:
        emit(frame, args, out)
        return EXIT_OK if len(frame) else EXIT_NOT_FOUND
    if frame.empty:
        print(f"{args.value}: not found in jobs, delayed, jobs:dead or the archive", file=out)
        return EXIT_NOT_FOUND
    for _, row in frame.iterrows():
        print(found_line(row), file=out)
    return EXIT_OK


COMMANDS: dict[str, Callable[[argparse.Namespace, TextIO], int]] = {
    "dead": cmd_dead,
    "groups": cmd_groups,
    "archive": cmd_archive,
    "export": cmd_export,
    "history": cmd_history,
    "flow": cmd_flow,
}
"""The table commands, by name (``find`` writes to stderr too: :func:`cmd_find`)."""


def run_read(args: argparse.Namespace, out: TextIO, err: TextIO) -> int | None:
    """Run ``args.command`` when it is one of this module's (else None)."""
    if args.command == "find":
        return cmd_find(args, out, err)
    command = COMMANDS.get(args.command)
    return None if command is None else command(args, out)
