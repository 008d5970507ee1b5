"""The moves of ``python -m opslib`` (replay, discard, run-now, cancel): one confirm-and-report path.

Each first runs its dry run and shows what it would take, then asks on a
terminal (``--yes`` skips the question, ``--dry-run`` stops after showing;
without a terminal and without ``--yes`` it refuses), moves exactly the rows
shown, and reports how many moved, how many someone else took meanwhile, and
the batch. A :class:`CliMove` states only what differs: the dry run, the
move, how its plan is listed and what the report says.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

import pandas as pd

from opslib.display import frame_text, plural
from opslib.errors import OpslibError
from opslib.moves.absent import NEVER, absent_reasons
from opslib.moves.cancel import cancel
from opslib.moves.delayed_jobs import CANCELLED, MISSING, QUEUED, run_now
from opslib.moves.discard import discard, discard_kind
from opslib.moves.patch import assignment_of
from opslib.moves.replay import replay, replay_kind
from opslib.queries import dead_letters, delayed
from worker.printable import printable
from worker.store.vocabulary import DISCARD_DISCARDED, DISCARD_WOULD_DISCARD, REPLAY_REPLAYED, REPLAY_WOULD_REPLAY

SHOWN = 20
"""A move lists at most this many of the entries it will take before asking."""


@dataclass(frozen=True)
class Listing:
    """What a move takes: its ``noun``, how the plan lists the first of them (``show``), where the ids
    the plan misses are not (``absent``), and why ids were missing at the move (``gone``)."""

    noun: str
    show: Callable[[pd.DataFrame, TextIO], None]
    absent: str
    gone: str
    explain: Callable[[pd.DataFrame], str] | None = None
    """Says more about the ids the plan misses (``replay 1-0``: never a dead letter), or None."""


@dataclass(frozen=True)
class CliMove:
    """One command's move: ``plan()`` is its dry run, ``move(taken)`` moves the rows the plan would take
    (those of status ``would``). ``planned`` starts the plan line (``"would replay"``); the report
    counts the rows of status ``done``."""

    question: Callable[[int], str]
    plan: Callable[[], pd.DataFrame]
    move: Callable[[pd.DataFrame], pd.DataFrame]
    would: str
    done: str
    planned: str
    listing: Listing


def not_in(count: int) -> str:
    """``1 id is not in`` / ``2 ids are not in``."""
    return f"{plural(count, 'id')} {'is' if count == 1 else 'are'} not in"


def confirmed(question: str, args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> bool:
    """``--yes``, or a "y" typed on a terminal; says why not on ``err`` / ``out`` otherwise."""
    if args.yes:
        return True
    if not stdin.isatty():
        verb = question.split()[0].lower()
        print(f"error: not done: no terminal to confirm on; add --yes to {verb} without asking", file=err)
        return False
    print(f"{question} [y/N] ", end="", file=out, flush=True)
    if stdin.readline().strip().lower() in ("y", "yes"):
        return True
    print("not done", file=out)
    return False


def confirm_and_move(
    move: CliMove, args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO
) -> pd.DataFrame | None:
    """Show the plan, ask, move, report. The frame of the move; an empty one when there was nothing to
    do or only a dry run was asked for; None when not confirmed."""
    plan = move.plan()
    taken = plan[plan["status"] == move.would]
    missing = len(plan[plan["status"] == MISSING])
    listing = move.listing
    absent = f"; {not_in(missing)} {listing.absent}" if missing else ""
    if missing and listing.explain is not None:
        absent += listing.explain(plan[plan["status"] == MISSING])
    print(f"{move.planned} {plural(len(taken), listing.noun)}{absent}", file=out)
    if len(taken):
        listing.show(taken, out)
    if len(taken) > SHOWN:
        print(f"  ... and {len(taken) - SHOWN} more", file=out)
    if args.dry_run or taken.empty:
        return taken.iloc[0:0]
    if not confirmed(move.question(len(taken)), args, out, err, stdin):
        return None
    done = move.move(taken)
    counts = done["status"].value_counts()
    print(
        f"{move.done} {counts.get(move.done, 0)}, missing {counts.get(MISSING, 0)} ({listing.gone}); "
        f"batch {done.attrs['batch']}",
        file=out,
    )
    return done


def show_dead(taken: pd.DataFrame, out: TextIO) -> None:
    """The first dead letters of a plan: id, kind and the start of the error (and, for a patched replay,
    what each would become)."""
    dead = dead_letters()
    changes = taken["changes"] if "changes" in taken else pd.Series("", index=taken.index)
    for dead_id, change in zip(taken["dead_id"].head(SHOWN), changes.head(SHOWN), strict=True):
        about = f"  {dead.at[dead_id, 'kind']}  {dead.at[dead_id, 'error'][:90]}" if dead_id in dead.index else ""
        # one line each, whatever the error or the change holds
        print(f"  {dead_id}{printable(about)}{printable('  set ' + change) if change else ''}", file=out)


def add_set_option(parser: argparse.ArgumentParser) -> None:
    """``replay``'s ``--set FIELD=VALUE`` (edit and replay: :mod:`opslib.moves.patch`)."""
    parser.add_argument(
        "--set",
        action="append",
        type=assignment,
        metavar="FIELD=VALUE",
        help="set this field on every replayed job (repeatable; 'v' re-runs the upcasters)",
    )


def assignment(text: str) -> tuple[str, str]:
    """A ``--set FIELD=VALUE`` argument as (field, value); argparse's one-line error otherwise."""
    try:
        return assignment_of(text)
    except OpslibError as exc:
        raise argparse.ArgumentTypeError(f"--set: {exc}") from None


def show_delayed(taken: pd.DataFrame, out: TextIO) -> None:
    """The first delayed jobs of a plan, as ``delayed`` lists them."""
    later = delayed()
    shown = later[later["job_id"].isin(taken["job_id"])].head(SHOWN)
    if len(shown):
        print(frame_text(shown[["run_at", "kind", "job_id", "attempts"]], index=False), file=out)


def explain_missing_dead(missing: pd.DataFrame) -> str:
    """Which missing dead ids were taken already and which never were dead letters (the archive's word)."""
    reasons = absent_reasons(list(missing["dead_id"]))
    if not reasons:
        return " (taken already, or never there: the archive could not say which)"
    never = [dead_id for dead_id, reason in reasons.items() if reason == NEVER]
    taken = len(reasons) - len(never)
    said = [f"{plural(taken, 'was', 'were')} taken already"] if taken else []
    if never:
        shown = ", ".join(never[:SHOWN]) + (f" and {len(never) - SHOWN} more" if len(never) > SHOWN else "")
        said.append(f"{shown} {'was' if len(never) == 1 else 'were'} {NEVER}")
    return ": " + "; ".join(said)


DEAD_LETTERS = Listing(
    "dead letter", show_dead, "jobs:dead nor dead in the archive", "taken by someone else since", explain_missing_dead
)
DELAYED_JOBS = Listing(
    "delayed job",
    show_delayed,
    "delayed (promoted, run or cancelled already)",
    "taken by a worker or someone else since",
)


def replay_move(args: argparse.Namespace) -> CliMove:
    """``replay ID ...`` or ``replay --kind K ...``."""

    patch = dict(getattr(args, "set", None) or [])

    def plan() -> pd.DataFrame:
        if args.kind:
            selection = {"signature": args.signature, "error_contains": args.error_contains, "since": args.since}
            return replay_kind(args.kind, **selection, dry_run=True, patch=patch)
        return replay(args.ids, dry_run=True, patch=patch)

    return CliMove(
        question=lambda n: f"Replay {plural(n, 'dead letter')}{' with ' + ', '.join(patch) + ' set' if patch else ''}?",
        plan=plan,
        move=lambda taken: replay(taken, reason=args.reason, by=args.by, patch=patch),
        would=REPLAY_WOULD_REPLAY,
        done=REPLAY_REPLAYED,
        planned="would replay",
        listing=DEAD_LETTERS,
    )


def discard_move(args: argparse.Namespace) -> CliMove:
    """``discard ID ... --reason R`` or ``discard --kind K ... --reason R``."""
    said = {"reason": args.reason, "by": args.by}

    def plan() -> pd.DataFrame:
        if args.kind:
            selection = {"signature": args.signature, "error_contains": args.error_contains, "since": args.since}
            return discard_kind(args.kind, **said, **selection, dry_run=True)
        return discard(args.ids, **said, dry_run=True)

    return CliMove(
        question=lambda n: f"Discard {plural(n, 'dead letter')}?",
        plan=plan,
        move=lambda taken: discard(taken["dead_id"], **said),
        would=DISCARD_WOULD_DISCARD,
        done=DISCARD_DISCARDED,
        planned="would discard",
        listing=DEAD_LETTERS,
    )


def run_now_move(args: argparse.Namespace) -> CliMove:
    """``run-now JOB_ID ...``."""
    return CliMove(
        question=lambda n: f"Run {n} delayed jobs now?",
        plan=lambda: run_now(args.job_ids, dry_run=True),
        move=lambda _taken: run_now(args.job_ids),
        would="would queue",
        done=QUEUED,
        planned="would run now",
        listing=DELAYED_JOBS,
    )


#: A cancel's statuses as the confirm-and-report path counts them: taken (stopped or removed) or missing.
CANCEL_AS = {"would remove": "would cancel", "removed": CANCELLED, "not found": MISSING, "finished": MISSING}


def as_taken(frame: pd.DataFrame) -> pd.DataFrame:
    """A cancel's frame with its statuses as :data:`CANCEL_AS` counts them (its batch kept)."""
    counted = frame.assign(status=frame["status"].replace(CANCEL_AS))
    counted.attrs["batch"] = frame.attrs.get("batch", "")
    return counted


def show_jobs(taken: pd.DataFrame, out: TextIO) -> None:
    """The first jobs of a cancel's plan: id, job id and kind."""
    print(frame_text(taken[["id", "job_id", "kind"]].head(SHOWN), index=False), file=out)


JOBS = Listing("job", show_jobs, "waiting, running or delayed (finished, or no such job)", "finished since")


def cancel_move(args: argparse.Namespace) -> CliMove:
    """``cancel ID ... --reason R``: stop running jobs, remove those not started (waiting, delayed, held back)."""
    return CliMove(
        question=lambda n: f"Cancel {plural(n, 'job')}?",
        plan=lambda: as_taken(cancel(args.job_ids, reason=args.reason, dry_run=True)),
        move=lambda taken: as_taken(cancel(list(taken["id"]), reason=args.reason)),
        would="would cancel",
        done=CANCELLED,
        planned="would cancel",
        listing=JOBS,
    )
