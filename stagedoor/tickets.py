"""render_tickets: an order's PDF, stored, then its completion recorded, once.

Two steps, as with a PDF kept in an object store: the PDF is stored (an upsert
that leaves a completed render alone), then the completion is recorded in its
own transaction, together with the outbox row of the "tickets ready" email.
A replay after a half-done attempt (PDF stored, completion not recorded)
stores it again and records it; a replay after a done one finds
``rendered_at`` set and changes nothing. One retry: a render that failed on
an order's data fails the same way again (the seat labelled ``14-C``).

A render is stopped after ``RENDER_TIMEOUT_S``, by a cancel or by the worker's
shutdown: the SQL steps are cancelled (``CancelledError``), and the PDF, drawn
in a thread, stops before its next page (``job.stopping``), so no thread of a
stopped render runs on. Only the pure PDF step is in the thread: it needs no
process of its own (``isolation="process"`` is for plain handlers that may
hang in C code and have no async steps).
"""

from __future__ import annotations

import asyncio
import logging

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from stagedoor.context import current
from stagedoor.errors import OrderNotFound
from stagedoor.ticket_pdf import TicketOrder, render_pdf
from worker import Job, RetryPolicy, job_kind

log = logging.getLogger("stagedoor.tickets")


async def load_order(conn: AsyncConnection, order_id: int) -> tuple[TicketOrder, list[str]]:
    """The order's ticket facts and its seat labels (in seat order)."""
    cur = await conn.execute(
        "SELECT o.buyer_email, e.name, e.starts_at FROM orders o JOIN events e ON e.id = o.event_id WHERE o.id = %s",
        (order_id,),
    )
    row = await cur.fetchone()
    if row is None:
        raise OrderNotFound(f"order {order_id} does not exist")
    cur = await conn.execute(
        "SELECT s.label FROM order_seats os JOIN seats s ON s.id = os.seat_id WHERE os.order_id = %s ORDER BY s.id",
        (order_id,),
    )
    labels = [label for (label,) in await cur.fetchall()]
    return TicketOrder(order_id, row[0], row[1], row[2]), labels


async def store_pdf(conn: AsyncConnection, order_id: int, pdf: bytes, pages: int) -> None:
    """Step 1: keep the PDF (replacing a half-done attempt's, never a completed one)."""
    await conn.execute(
        "INSERT INTO tickets (order_id, pdf, pages) VALUES (%s, %s, %s)"
        " ON CONFLICT (order_id) DO UPDATE SET pdf = EXCLUDED.pdf, pages = EXCLUDED.pages, stored_at = now()"
        " WHERE tickets.rendered_at IS NULL",
        (order_id, pdf, pages),
    )


async def record_done(conn: AsyncConnection, order_id: int, email: str) -> bool:
    """Step 2: mark the render done and queue the "tickets ready" email, once; False if already done."""
    async with conn.transaction():
        cur = await conn.execute(
            "UPDATE tickets SET rendered_at = now() WHERE order_id = %s AND rendered_at IS NULL", (order_id,)
        )
        if cur.rowcount == 0:
            return False
        await conn.execute(
            "INSERT INTO outbox (kind, payload) VALUES ('send_email', %s)",
            (Jsonb({"email": email, "template": "tickets_ready", "order_id": str(order_id)}),),
        )
    return True


#: A render of a few hundred seats takes well under a second; one stuck on a bad order is stopped after this.
RENDER_TIMEOUT_S = 60.0


@job_kind("render_tickets", retry=RetryPolicy(retries=1), timeout_s=RENDER_TIMEOUT_S)
async def render_tickets(job: Job) -> None:
    """Fields: ``order_id``."""
    order_id = int(job.fields["order_id"])
    async with current().pool.connection() as conn:
        cur = await conn.execute("SELECT rendered_at FROM tickets WHERE order_id = %s", (order_id,))
        done = await cur.fetchone()
        if done is not None and done[0] is not None:
            log.info("Tickets of order %d were rendered at %s already; nothing to do.", order_id, done[0])
            return
        order, labels = await load_order(conn, order_id)
        pdf = await asyncio.to_thread(render_pdf, order, labels, job.stopping)  # stops between pages when told
        await store_pdf(conn, order_id, pdf, len(labels))
        if await record_done(conn, order_id, order.buyer_email):
            log.info("Rendered %d tickets of order %d (%d bytes).", len(labels), order_id, len(pdf))
