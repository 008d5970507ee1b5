"""The flow counters' layout: what a worker writes per kind and period, and what opslib reads back.

Each worker counts, per kind, the jobs that succeeded, were retried and were
dead-lettered, and how long they waited and ran, and adds those counts every
second or so to one hash per kind and minute and one per kind and hour
(:meth:`worker.store.keys.Keys.flow`). Minute hashes are kept
:data:`MINUTES_KEPT_S` (a day), hour hashes ``FLOW_RETENTION`` days: the
hours are the roll-up of the minutes, written at the same time, so nothing
has to move them later.

A hash's fields:

=================  =====================================================
field              holds
=================  =====================================================
``succeeded``      jobs whose handler returned
``retried``        failed attempts put back in ``delayed``
``dead``           jobs dead-lettered (whether or not they ran)
``wait:<i>``       jobs that started after waiting in bucket ``i``
``run:<i>``        attempts that ran for a time in bucket ``i``
=================  =====================================================

Bucket ``i`` holds times up to :data:`BOUNDS_S` ``[i]`` (and above the
previous bound); the last bucket, ``i = len(BOUNDS_S)``, holds everything
longer. The bounds double from 0.1 ms to about 1.9 hours: 28 buckets, so a
percentile read from them (``opslib.flow``, interpolating inside the bucket)
lies within the bucket of the exact one. Only non-zero fields are written, so
a hash stays small (a Redis listpack: at most 59 fields).
"""

from __future__ import annotations

SUCCEEDED = "succeeded"
RETRIED = "retried"
DEAD = "dead"
COUNTS = (SUCCEEDED, RETRIED, DEAD)
WAIT = "wait"
RUN = "run"

#: Upper bounds of the time buckets, in seconds: 0.1 ms doubling to about 6,711 s.
BOUNDS_S: tuple[float, ...] = tuple(0.0001 * 2**i for i in range(27))
BUCKETS = len(BOUNDS_S) + 1

MINUTE_S = 60
HOUR_S = 3600
#: How long minute hashes are kept: older periods are read from the hours.
MINUTES_KEPT_S = 86_400
#: Added to each hash's expiry, so that a reader at the edge of a window still finds it whole.
EXPIRY_MARGIN_S = HOUR_S

#: A kind name a job brought that no worker declared (dead as malformed or unknown_kind): counted under one name,
#: so that made-up names cannot make keys without bound.
UNDECLARED = "(undeclared)"


def bucket_field(measure: str, index: int) -> str:
    """The field of bucket ``index`` of ``measure`` (:data:`WAIT` or :data:`RUN`): ``wait:3``."""
    return f"{measure}:{index}"
