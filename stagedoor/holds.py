"""expire_holds: every minute, give expired holds' seats back to the map.

The sweep that keeps at most one hold row per seat (``holds.seat_id`` is
unique): it deletes every hold whose time has passed and sets those seats
available again, only where the seat is still ``held`` (a seat sold since
keeps its status and version). One transaction; run twice, the second run
finds nothing. No retries: the next minute covers a failed run.
"""

from __future__ import annotations

import logging

from psycopg import AsyncConnection

from stagedoor.context import current
from worker import Job, job_kind, schedule

log = logging.getLogger("stagedoor.holds")


async def expire(conn: AsyncConnection) -> tuple[int, int]:
    """Delete expired holds and free their held seats; return (holds deleted, seats freed)."""
    async with conn.transaction():
        cur = await conn.execute("DELETE FROM holds WHERE expires_at < now() RETURNING seat_id")
        seat_ids = [row[0] for row in await cur.fetchall()]
        if not seat_ids:
            return 0, 0
        cur = await conn.execute(
            "UPDATE seats SET status = 'available', version = version + 1 WHERE id = ANY(%s) AND status = 'held'",
            (seat_ids,),
        )
        return len(seat_ids), cur.rowcount


@job_kind("expire_holds")
async def expire_holds(job: Job) -> None:
    async with current().pool.connection() as conn:
        deleted, freed = await expire(conn)
    if deleted:
        log.info("Expired %d holds; %d seats are available again (job %s).", deleted, freed, job.job_id)


schedule("expire_holds", "expire_holds", every_s=60)
