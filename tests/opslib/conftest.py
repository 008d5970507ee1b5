"""Fixtures of the opslib tests: the keyword arguments that point opslib at the test's queue."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from worker.store.keys import Keys


@pytest.fixture
def at(r: redis.Redis, keys: Keys) -> dict[str, Any]:
    """``client=`` and ``prefix=`` for every opslib call: the test's server and key prefix."""
    return {"client": r, "prefix": keys.prefix}
