"""The demo night's data: three organizers' events tonight, one seat map typed badly.

:func:`load_night` writes, into a migrated database, deterministically (a
seeded generator; only the times move with ``now``):

- Divadlo Na Rohu, "Cyrano" tonight: 60 seats ``1A``..``10F``, 10 paid
  orders, 11 holds (3 expired already, then one expiring before each of the
  next 8 minute ticks, when expire_holds runs).
- Klub Kotelna, "Late-night jazz" tonight: a balcony of 40 seats typed as
  ``11-A``..``20-D`` (``14-C`` among them), every one sold, one per order:
  these 40 orders' render_tickets jobs fail with ``SeatLabelInvalid`` and are
  dead-lettered with attempts 2.
- Filharmonie Brno, "Dvořák: Symphony No. 9" tonight: 60 seats ``1A``..``12E``,
  10 paid orders, 10 holds (2 expired, then one before each of the next 8 ticks).
- With ``next_week=True`` (``make run``), "Cyrano" next week: 4 paid orders
  whose reminders wait in ``delayed`` for six days (``--burst`` would wait for
  them too, so the tests leave this out).

Every paid order goes through :func:`~stagedoor.orders.record_paid_order`:
its payment dated yesterday (UTC) and three outbox rows (confirmation email,
render_tickets, send_reminder, due 24 hours before the event: at once for
tonight's events). :attr:`Night.payrail_payments` is what Payrail's stand-in
should serve for yesterday: ours with four mismatches, one of each kind.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg

from stagedoor.orders import Payment, record_paid_order
from stagedoor.schema import TABLE_NAMES
from worker.archive.actions_table import ACTIONS_TABLE
from worker.archive.table import TABLE as ARCHIVE_TABLE

SEED = 2026

#: The mismatches planted in Payrail's copy of yesterday (one of each kind).
PLANTED_ISSUES = ("amount_differs", "missing_at_payrail", "missing_here", "status_differs")


@dataclass(frozen=True)
class Venue:
    """One organizer's event tonight (or next week) and what happened to its seats."""

    organizer: str
    event: str
    seat_map: str
    labels: list[str]
    price: Decimal
    starts_in: timedelta
    paid_orders: int
    order_sizes: tuple[int, ...] = (1, 2, 2, 3, 4)
    expired_holds: int = 0
    later_holds: int = 0

    @property
    def typed_badly(self) -> bool:
        """The seat map whose labels the barcode refuses (``14-C``)."""
        return any("-" in label for label in self.labels)


def _labels(numbers: range, rows: str, sep: str = "") -> list[str]:
    return [f"{n}{sep}{row}" for n in numbers for row in rows]


VENUES = (
    Venue(
        "Divadlo Na Rohu", "Cyrano", "Main hall", _labels(range(1, 11), "ABCDEF"), Decimal("450.00"),
        timedelta(hours=3), paid_orders=10, expired_holds=3, later_holds=8,
    ),
    Venue(
        "Klub Kotelna", "Late-night jazz", "Balcony (typed by hand)", _labels(range(11, 21), "ABCD", "-"),
        Decimal("390.00"), timedelta(hours=5), paid_orders=40, order_sizes=(1,),
    ),
    Venue(
        "Filharmonie Brno", "Dvořák: Symphony No. 9", "Stalls", _labels(range(1, 13), "ABCDE"), Decimal("620.00"),
        timedelta(hours=4), paid_orders=10, expired_holds=2, later_holds=8,
    ),
)  # fmt: skip
NEXT_WEEK = Venue(
    "Divadlo Na Rohu", "Cyrano (next week)", "Main hall, next week", _labels(range(1, 11), "ABCDEF"),
    Decimal("450.00"), timedelta(days=7), paid_orders=4,
)  # fmt: skip


@dataclass
class Night:
    """What :func:`load_night` wrote, and what the night should end with."""

    organizers: dict[str, int] = field(default_factory=dict)
    events: dict[str, int] = field(default_factory=dict)
    seats: int = 0
    holds: int = 0
    holds_expired_at_load: int = 0
    paid_orders: list[int] = field(default_factory=list)
    bad_orders: list[int] = field(default_factory=list)
    """The 40 orders whose seat is labelled like ``14-C`` (their render fails)."""
    bad_labels: list[str] = field(default_factory=list)
    outbox_rows: int = 0
    payrail_day: str = ""
    payrail_payments: list[dict[str, Any]] = field(default_factory=list)

    @property
    def good_orders(self) -> list[int]:
        bad = set(self.bad_orders)
        return [o for o in self.paid_orders if o not in bad]


def clear_night(conn: psycopg.Connection, queue: str = "") -> None:
    """Empty Stagedoor's tables and the ``queue``'s rows of the archive and the operators' actions
    (``make run`` on its own embedded database, before a new night).

    Order ids restart at 1 with the tables, so an archive kept from an earlier
    night would hold a second order 41 and its actions another night's replays:
    the story notebook would count both. Redis (embedded, not saved) starts
    empty anyway; a fresh night is fresh everywhere.
    """
    conn.execute(f"TRUNCATE {', '.join(TABLE_NAMES)} RESTART IDENTITY CASCADE")
    for table in (ARCHIVE_TABLE, ACTIONS_TABLE):
        conn.execute(f"DELETE FROM {table} WHERE queue = %s", (queue,))


def load_night(db: psycopg.Connection | str, *, now: datetime | None = None, next_week: bool = False) -> Night:
    """Load the demo night into a migrated database (a connection, or a URL to connect to)."""
    if isinstance(db, str):
        with psycopg.connect(db, autocommit=True) as conn:
            return load_night(conn, now=now, next_week=next_week)
    now = now or datetime.now(UTC)
    rng = random.Random(SEED)
    night = Night()
    yesterday = datetime(now.year, now.month, now.day, tzinfo=UTC) - timedelta(days=1)
    night.payrail_day = yesterday.date().isoformat()
    payments: list[Payment] = []
    for venue in (*VENUES, NEXT_WEEK) if next_week else VENUES:
        free = _venue(db, night, venue, now)
        for _ in range(venue.paid_orders):
            chosen = [free.pop(rng.randrange(len(free))) for _ in range(rng.choice(venue.order_sizes))]
            payment = Payment(
                amount=venue.price * len(chosen),
                currency="CZK",
                payrail_ref=f"pr_{rng.getrandbits(48):012x}",
                created_at=yesterday + timedelta(hours=8, seconds=rng.randrange(14 * 3600)),
            )
            trace = {"request_id": f"{rng.getrandbits(32):08x}", "trace": f"{rng.getrandbits(32):08x}"}
            email = f"buyer{len(night.paid_orders) + 1}@example.com"
            order_id = record_paid_order(db, night.events[venue.event], chosen, email, payment, trace=trace)
            night.paid_orders.append(order_id)
            payments.append(payment)
            if venue.typed_badly:
                night.bad_orders.append(order_id)
        _holds(db, night, venue, free, now, rng)
    night.payrail_payments = _payrail_copy(payments, yesterday, rng)
    cur = db.execute("SELECT count(*) FROM outbox")
    night.outbox_rows = int(cur.fetchone()[0])  # type: ignore[index]
    return night


def _venue(conn: psycopg.Connection, night: Night, venue: Venue, now: datetime) -> list[int]:
    """The organizer (once), the seat map, the event and its seats; return the seat ids."""
    if venue.organizer not in night.organizers:
        cur = conn.execute("INSERT INTO organizers (name) VALUES (%s) RETURNING id", (venue.organizer,))
        night.organizers[venue.organizer] = cur.fetchone()[0]  # type: ignore[index]
    organizer_id = night.organizers[venue.organizer]
    cur = conn.execute(
        "INSERT INTO seat_maps (organizer_id, name) VALUES (%s, %s) RETURNING id", (organizer_id, venue.seat_map)
    )
    seat_map_id = cur.fetchone()[0]  # type: ignore[index]
    starts_at = (now + venue.starts_in).replace(minute=30, second=0, microsecond=0)
    cur = conn.execute(
        "INSERT INTO events (organizer_id, seat_map_id, name, starts_at) VALUES (%s, %s, %s, %s) RETURNING id",
        (organizer_id, seat_map_id, venue.event, starts_at),
    )
    night.events[venue.event] = cur.fetchone()[0]  # type: ignore[index]
    cur = conn.execute(
        "INSERT INTO seats (seat_map_id, label) SELECT %s, label FROM unnest(%s::text[]) AS label RETURNING id",
        (seat_map_id, venue.labels),
    )
    ids = [seat_id for (seat_id,) in cur.fetchall()]
    night.seats += len(ids)
    if venue.typed_badly:
        night.bad_labels.extend(venue.labels)
    return ids


def _holds(
    conn: psycopg.Connection, night: Night, venue: Venue, free: list[int], now: datetime, rng: random.Random
) -> None:
    """Holds on free seats: some expired already, then one expiring before each of the next minute ticks."""
    minute = now.replace(second=0, microsecond=0)
    expiries = [now - timedelta(minutes=2)] * venue.expired_holds + [
        minute + timedelta(minutes=m, seconds=-rng.randrange(5, 50)) for m in range(1, venue.later_holds + 1)
    ]
    for expires_at in expiries:
        seat_id = free.pop(rng.randrange(len(free)))
        with conn.transaction():
            conn.execute("UPDATE seats SET status = 'held', version = version + 1 WHERE id = %s", (seat_id,))
            conn.execute(
                "INSERT INTO holds (seat_id, buyer_email, created_at, expires_at) VALUES (%s, %s, %s, %s)",
                (seat_id, f"browser{seat_id}@example.com", now - timedelta(minutes=8), expires_at),
            )
    night.holds += len(expiries)
    night.holds_expired_at_load += venue.expired_holds


def _payrail_copy(payments: list[Payment], day: datetime, rng: random.Random) -> list[dict[str, Any]]:
    """Payrail's records of ``day``: ours, with one mismatch of each kind planted."""
    records = [
        {"reference": p.payrail_ref, "amount": str(p.amount), "currency": p.currency, "status": p.status}
        for p in payments
        if day <= p.created_at < day + timedelta(days=1)
    ]
    records.pop(3)  # missing_at_payrail
    records[5]["amount"] = str(Decimal(records[5]["amount"]) + Decimal("50.00"))  # amount_differs
    records[7]["status"] = "refunded"  # status_differs
    records.append(  # missing_here
        {"reference": f"pr_{rng.getrandbits(48):012x}", "amount": "450.00", "currency": "CZK", "status": "captured"}
    )
    return records
