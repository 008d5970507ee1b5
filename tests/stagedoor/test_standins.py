"""The stand-ins speak HTTP on 127.0.0.1 and say what was wrong with a request."""

from __future__ import annotations

import signal
import subprocess
import sys

import httpx

from stagedoor.standins import MailStandIn, PayrailStandIn
from tests.helpers import ROOT
from worker.embedded.servers import free_port

MESSAGE = {"to": "ana@example.com", "subject": "Hi", "text": "Hello"}


def test_mail_dedups_by_key_and_refuses_requests_without_one(mail: MailStandIn) -> None:
    url = f"{mail.url}/v1/messages"
    assert httpx.post(url, json=MESSAGE).status_code == 400
    first = httpx.post(url, json=MESSAGE, headers={"Idempotency-Key": "k1"})
    again = httpx.post(url, json={**MESSAGE, "text": "changed"}, headers={"Idempotency-Key": "k1"})
    assert (first.status_code, again.status_code) == (202, 200)
    assert again.json() == {"id": first.json()["id"], "duplicate": True}
    assert httpx.post(url, json={"to": "x"}, headers={"Idempotency-Key": "k2"}).status_code == 422
    assert [m["text"] for m in httpx.get(f"{mail.url}/_stand-in/messages").json()] == ["Hello"]


def test_mail_fails_the_next_n_requests_when_told_over_http(mail: MailStandIn) -> None:
    assert httpx.post(f"{mail.url}/_stand-in/fail-next", json={"count": 2, "status": 503}).status_code == 200
    codes = [httpx.post(f"{mail.url}/v1/messages", json=MESSAGE, headers={"Idempotency-Key": "k"}).status_code
             for _ in range(3)]  # fmt: skip
    assert codes == [503, 503, 202]


def test_payrail_pages_a_day_and_checks_its_parameters(payrail: PayrailStandIn) -> None:
    records = [{"reference": f"pr_{i}", "amount": "1.00", "currency": "CZK", "status": "captured"} for i in range(5)]
    assert httpx.put(f"{payrail.url}/_stand-in/payments/2026-11-29", json=records).status_code == 200
    page = httpx.get(f"{payrail.url}/v1/payments", params={"date": "2026-11-29", "page": 2, "per_page": 2}).json()
    assert (page["payments"], page["next_page"]) == (records[2:4], 3)
    last = httpx.get(f"{payrail.url}/v1/payments", params={"date": "2026-11-29", "page": 3, "per_page": 2}).json()
    assert last["next_page"] is None
    bad = httpx.get(f"{payrail.url}/v1/payments", params={"date": "yesterday"})
    assert (bad.status_code, bad.json()) == (400, {"error": "date='yesterday' is not YYYY-MM-DD"})


def test_python_m_standins_runs_until_sigint() -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "stagedoor.standins", "mail", "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == f"mail stand-in listening on http://127.0.0.1:{port}"
        assert httpx.get(f"http://127.0.0.1:{port}/_stand-in/messages").json() == []
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
