"""Fixtures for Stagedoor's handlers: a migrated schema of the test's own, the two
stand-ins, and ``run_job`` to call a handler the way the worker does (inside
the Stagedoor context), without a worker process."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from stagedoor.context import open_context
from stagedoor.schema import migrate_url
from stagedoor.standins import MailStandIn, PayrailStandIn, start_mail, start_payrail
from worker.kinds import Job

RunJob = Callable[..., Any]


@pytest.fixture
def db(pg_url: str) -> str:
    """The test's schema, migrated."""
    migrate_url(pg_url)
    return pg_url


@pytest.fixture
def conn(db: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(db, autocommit=True) as connection:
        yield connection


@pytest.fixture
def mail() -> Iterator[MailStandIn]:
    with start_mail() as stand_in:
        yield stand_in


@pytest.fixture
def payrail() -> Iterator[PayrailStandIn]:
    with start_payrail() as stand_in:
        yield stand_in


def make_job(kind: str, fields: dict[str, str] | None = None, *, job_id: str | None = None) -> Job:
    fields = {"kind": kind, "attempts": "0", **(fields or {})}
    job_id = job_id or fields.get("outbox_id") or uuid.uuid4().hex
    return Job(kind=kind, job_id=job_id, attempts=0, entry_id="1-0", fields=fields)


@pytest.fixture
def run_job(db: str, mail: MailStandIn, payrail: PayrailStandIn) -> RunJob:
    """``run_job(handler, job, **context_overrides)``: run one handler to its end (or its exception)."""

    def run(handler: Callable[[Job], Any], job: Job, **overrides: Any) -> Any:
        async def main() -> Any:
            options = {"mail_api_url": mail.url, "payrail_url": payrail.url, **overrides}
            async with open_context(db, **options):
                return await handler(job)

        return asyncio.run(main())

    return run
