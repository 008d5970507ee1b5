"""send_email and send_reminder: messages through the mail provider's HTTP API.

Each POST carries an ``Idempotency-Key`` that is the same for every attempt
and every replay of one job (``outbox:<outbox_id>`` for a job the relay
published, ``job:<job_id>`` otherwise), so the provider sends a message once
however often we ask. A 5xx, a 429 or a timeout raises
:class:`MailUnavailable` and the kind's policy retries (5 retries, full jitter
from 1 s doubling to a 60 s cap); the handler never loops itself. Any other
4xx, or an unknown template, raises :class:`MailRejected`, which the policy
gives up on: the job is dead-lettered at once with reason ``permanent``.
"""

from __future__ import annotations

import logging

import httpx

from stagedoor.context import StagedoorContext, current
from stagedoor.errors import MailRejected, MailUnavailable, OrderNotFound
from stagedoor.queues import CRITICAL
from worker import Job, RetryPolicy, job_kind

log = logging.getLogger("stagedoor.mail")

MAIL_RETRY = RetryPolicy(retries=5, base_s=1.0, cap_s=60.0, give_up_on=(MailRejected,))

#: Subject and text of each message ``send_email`` knows, filled from the job's fields.
TEMPLATES = {
    "order_confirmation": (
        "Your Stagedoor order {order_id} is confirmed",
        "Thank you for your order {order_id}. Your tickets follow in a separate message.",
    ),
    "tickets_ready": (
        "Your tickets for order {order_id}",
        "Your tickets for order {order_id} are ready: one page per seat, each with its barcode.",
    ),
}


def idempotency_key(job: Job) -> str:
    """The same key for every attempt and replay of ``job``."""
    outbox_id = job.fields.get("outbox_id")
    return f"outbox:{outbox_id}" if outbox_id else f"job:{job.job_id}"


async def post_message(ctx: StagedoorContext, key: str, to: str, subject: str, text: str) -> str:
    """POST one message; return the provider's message id, or raise so the policy decides."""
    url = f"{ctx.mail_url()}/v1/messages"
    try:
        response = await ctx.http.post(
            url, json={"to": to, "subject": subject, "text": text}, headers={"Idempotency-Key": key}
        )
    except httpx.TimeoutException as exc:
        raise MailUnavailable(f"the mail API did not answer within {ctx.http.timeout.read} s ({url})") from exc
    except httpx.TransportError as exc:
        raise MailUnavailable(f"cannot reach the mail API at {url}: {exc}") from exc
    if response.status_code >= 500 or response.status_code == 429:
        raise MailUnavailable(f"the mail API answered {response.status_code} for message {key}")
    if response.status_code >= 400:
        raise MailRejected(f"the mail API refused message {key} with {response.status_code}: {response.text[:200]}")
    return str(response.json().get("id", ""))


@job_kind("send_email", retry=MAIL_RETRY, queue=CRITICAL)
async def send_email(job: Job) -> None:
    """Fields: ``email``, ``template`` (a key of TEMPLATES) and what it names (``order_id``)."""
    template = job.fields.get("template", "")
    if template not in TEMPLATES:
        raise MailRejected(f"template {template!r} is unknown; known: {', '.join(sorted(TEMPLATES))}")
    subject, text = (part.format_map(job.fields) for part in TEMPLATES[template])
    key = idempotency_key(job)
    message_id = await post_message(current(), key, job.fields["email"], subject, text)
    log.info("Sent %s to %s as message %s (key %s).", template, job.fields["email"], message_id, key)


@job_kind("send_reminder", retry=MAIL_RETRY, queue=CRITICAL)
async def send_reminder(job: Job) -> None:
    """Fields: ``order_id``. Sends nothing for an order that is no longer paid."""
    ctx = current()
    order_id = int(job.fields["order_id"])
    async with ctx.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT o.buyer_email, o.status, e.name, e.starts_at FROM orders o JOIN events e ON e.id = o.event_id"
            " WHERE o.id = %s",
            (order_id,),
        )
        row = await cur.fetchone()
    if row is None:
        raise OrderNotFound(f"order {order_id} does not exist")
    email, status, event, starts_at = row
    if status != "paid":
        log.info("Skipped the reminder of order %d: it is %s.", order_id, status)
        return
    subject = f"Reminder: {event} starts {starts_at:%A %d %B at %H:%M %Z}"
    text = f"Your order {order_id} for {event} starts at {starts_at.isoformat()}. See you there."
    key = idempotency_key(job)
    message_id = await post_message(ctx, key, email, subject, text)
    log.info("Sent the reminder of order %d to %s as message %s.", order_id, email, message_id)
