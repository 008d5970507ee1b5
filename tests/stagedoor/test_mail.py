"""send_email and send_reminder: one message per job however often it runs; 5xx, 429 and
timeouts raise so the policy retries; through a real worker, 503s are retried and nothing
is sent twice, and a 4xx refusal is dead-lettered at once as permanent."""

from __future__ import annotations

import psycopg
import pytest
import redis

from stagedoor.errors import MailRejected, MailUnavailable, NotConfigured
from stagedoor.mail import send_email, send_reminder
from stagedoor.queues import CRITICAL
from stagedoor.standins import MailStandIn
from tests.helpers import Workers
from tests.stagedoor.conftest import RunJob, make_job
from tests.stagedoor.helpers import event_with_seats, paid_order
from worker.store.enqueue import enqueue
from worker.store.keys import Keys

CONFIRMATION = {"email": "ana@example.com", "template": "order_confirmation", "order_id": "4471"}


def test_send_email_twice_sends_one_message(run_job: RunJob, mail: MailStandIn) -> None:
    job = make_job("send_email", {**CONFIRMATION, "outbox_id": "88210"})
    run_job(send_email, job)
    run_job(send_email, job)
    (message,) = mail.messages()
    assert message["key"] == "outbox:88210"
    assert (message["to"], message["subject"]) == ("ana@example.com", "Your Stagedoor order 4471 is confirmed")
    assert mail.answered == {202: 1, 200: 1}


def test_a_scheduled_or_enqueued_job_uses_its_job_id_as_the_key(run_job: RunJob, mail: MailStandIn) -> None:
    run_job(send_email, make_job("send_email", CONFIRMATION, job_id="abc123"))
    assert [m["key"] for m in mail.messages()] == ["job:abc123"]


@pytest.mark.parametrize("status", [503, 500, 429])
def test_unavailable_answers_raise_so_the_policy_retries(run_job: RunJob, mail: MailStandIn, status: int) -> None:
    mail.fail_next(1, status)
    with pytest.raises(MailUnavailable, match=f"answered {status}"):
        run_job(send_email, make_job("send_email", CONFIRMATION))
    assert mail.messages() == []


def test_a_timeout_raises(run_job: RunJob, mail: MailStandIn) -> None:
    mail.slow_next(1, 1.0)
    with pytest.raises(MailUnavailable, match=r"did not answer within 0\.2 s"):
        run_job(send_email, make_job("send_email", CONFIRMATION), http_timeout_s=0.2)


def test_a_refusal_and_an_unknown_template_raise_mail_rejected(run_job: RunJob, mail: MailStandIn) -> None:
    mail.fail_next(1, 400)
    with pytest.raises(MailRejected, match=r"refused .* with 400"):
        run_job(send_email, make_job("send_email", CONFIRMATION))
    with pytest.raises(MailRejected, match="template 'welcome' is unknown"):
        run_job(send_email, make_job("send_email", {**CONFIRMATION, "template": "welcome"}))


def test_without_mail_api_url_the_error_says_what_to_set(run_job: RunJob) -> None:
    with pytest.raises(NotConfigured, match="MAIL_API_URL is not set"):
        run_job(send_email, make_job("send_email", CONFIRMATION), mail_api_url="")


def test_send_reminder_once_for_a_paid_order_and_never_for_a_cancelled_one(
    conn: psycopg.Connection, run_job: RunJob, mail: MailStandIn
) -> None:
    event, (a, b) = event_with_seats(conn, ["1A", "1B"])
    paid, cancelled = paid_order(conn, event, [a], "pr_1"), paid_order(conn, event, [b], "pr_2")
    conn.execute("UPDATE orders SET status = 'cancelled' WHERE id = %s", (cancelled,))
    for _ in range(2):
        run_job(send_reminder, make_job("send_reminder", {"order_id": str(paid), "outbox_id": "3"}))
        run_job(send_reminder, make_job("send_reminder", {"order_id": str(cancelled), "outbox_id": "6"}))
    (message,) = mail.messages()
    assert message["subject"].startswith("Reminder: Hamlet starts ")
    assert (message["to"], message["key"]) == ("buyer@example.com", "outbox:3")


def test_through_the_worker_503s_are_retried_and_the_message_is_sent_once(
    r: redis.Redis, keys: Keys, workers: Workers, mail: MailStandIn, db: str
) -> None:
    mail.fail_next(3)
    enqueue(r, "send_email", {**CONFIRMATION, "job_id": "mail-1"}, prefix=keys.prefix)
    out = workers.burst("stagedoor.kinds", DATABASE_URL=db, MAIL_API_URL=mail.url).stdout
    assert out.count("failed on attempt") == 3 and "answered 503" in out
    assert mail.answered == {503: 3, 202: 1}
    assert [m["key"] for m in mail.messages()] == ["job:mail-1"]
    assert r.xlen(Keys(keys.prefix, queue=CRITICAL).dead) == 0


def test_through_the_worker_a_4xx_refusal_is_dead_lettered_at_once_as_permanent(
    r: redis.Redis, keys: Keys, workers: Workers, mail: MailStandIn, db: str
) -> None:
    mail.fail_next(1, 422)
    enqueue(r, "send_email", {**CONFIRMATION, "job_id": "mail-2"}, prefix=keys.prefix)
    out = workers.burst("stagedoor.kinds", DATABASE_URL=db, MAIL_API_URL=mail.url).stdout
    assert mail.answered == {422: 1}, "a refused message was sent again"
    assert "retrying in" not in out
    assert "Job send_email mail-2 failed permanently on attempt 1 of 6" in out
    [(_, dead)] = r.xrange(Keys(keys.prefix, queue=CRITICAL).dead)  # in send_email's queue
    assert dead[b"reason"] == b"permanent"
    assert dead[b"attempts"] == b"1"
    assert dead[b"error"].startswith(b"MailRejected: the mail API refused message job:mail-2 with 422")
    assert r.zcard(Keys(keys.prefix, queue=CRITICAL).delayed) == 0
