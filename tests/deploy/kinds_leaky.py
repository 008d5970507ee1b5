"""Job kinds whose failures say too much: secrets in every shape, terminal escapes, a 20 MB message.

``leak`` fails twice (a retry, then a dead letter) with a message that holds
the token its ``n`` field picks (:data:`TOKENS`) in each shape a handler's error takes, the
password this worker was configured with (``ARCHIVE_URL``'s), and a value of
the application's own secret shape (``REDACT_PATTERNS``), its cause holding
them too; ``leak_isolated`` does the same in a child process
(``isolation="process"``). ``hostile`` fails with control, escape, bidi and zero-width
characters; ``huge`` with a 20 MB message. With ``TRACE_SPANS_FILE`` set, the
worker traces (:mod:`tests.tracing.helpers_spans`).
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from worker import Job, RetryPolicy, job_kind

if os.environ.get("TRACE_SPANS_FILE"):
    from tests.tracing import helpers_spans

    helpers_spans.install(os.environ["TRACE_SPANS_FILE"])

HOSTILE = "\x1b]52;c;cGF5bG9hZA==\x07\x1b]0;title\x07\x1b[2J\x9b31m\x07 \u202eevil\u2066 zero\u200bwidth\nforged line"
HUGE_CHARS = 20 * 1024 * 1024
TOKENS = ("wqzPLMxkrTbn", "hjdKQnvbYeos")
"""One token per job: letters only, so that a signature would keep them apart were they not hidden."""


def shapes(token: str, configured: str) -> list[str]:
    """Each shape of a secret in a handler's error, with ``token`` (and ``configured``) as the secret."""
    return [
        f"postgresql://app:{token}@db.internal:5432/app",
        f"redis://:{token}@cache.internal:6379/0",
        f"GET https://api.example/v1/orders?api_key={token}&page=2",
        f"Authorization: Bearer {token}",
        f"X-Api-Key: {token}",
        f"password={token}",
        f"redis//default:{token}@127.0.0.1:6379/0",
        f'body {{"token": "{token}", "access_key": "{token}"}}',
        f"refused for {configured}",
        f"order key ordsecret_{token}",
    ]


@job_kind("leak", retry=RetryPolicy(retries=1, base_s=0.01, cap_s=0.01))
async def leak(job: Job) -> None:
    configured = urlsplit(os.environ["ARCHIVE_URL"]).password or ""
    told = shapes(TOKENS[int(job.fields["n"])], configured)
    try:
        raise KeyError(told[0])
    except KeyError as cause:
        raise RuntimeError("; ".join(told)) from cause


@job_kind("leak_isolated", isolation="process", retry=RetryPolicy(retries=1, base_s=0.01, cap_s=0.01))
def leak_isolated(job: Job) -> None:
    """``leak`` in a child process: its traceback comes back as text, the cause of the exception re-raised."""
    configured = urlsplit(os.environ["ARCHIVE_URL"]).password or ""
    raise RuntimeError("; ".join(shapes(TOKENS[int(job.fields["n"])], configured)))


@job_kind("hostile")
async def hostile(job: Job) -> None:
    raise ValueError(HOSTILE)


@job_kind("huge")
async def huge(job: Job) -> None:
    raise ValueError("q" * HUGE_CHARS)


@job_kind("small")
async def small(job: Job) -> None:
    raise ValueError("q")
