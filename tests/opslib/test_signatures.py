"""Error signatures on real error strings, and grouping by them (no Redis)."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from opslib.columns import entry_times
from opslib.errors import OpslibError
from opslib.frames import dead_to_frame
from opslib.signatures import GROUP_COLUMNS, check_signature, error_type, failure_groups_to_frame, signature

# (error as the worker stores it, the group it belongs to)
REAL_ERRORS = [
    ("SeatLabelInvalid: '14-C' is not a row letter and a seat number", "seat"),
    ("SeatLabelInvalid: '7-A' is not a row letter and a seat number", "seat"),
    ('SeatLabelInvalid: "12-B" is not a row letter and a seat number', "seat"),
    ("ConnectionError: Error 111 connecting to 127.0.0.1:6379. Connection refused.", "refused"),
    ("ConnectionError: Error 111 connecting to 127.0.0.1:6380. Connection refused.", "refused"),
    ("HTTPStatusError: Server error '503 Service Unavailable' for url 'https://mail.example/v3/send'", "http"),
    ("HTTPStatusError: Server error '502 Bad Gateway' for url 'https://mail.example/v3/send'", "http"),
    ("KeyError: 'order_id'", "keyerror"),
    ("KeyError: 'email'", "keyerror"),
    ("JobTimeout: render_tickets ran longer than its timeout of 30.0 s", "timeout"),
    ("JobTimeout: render_tickets ran longer than its timeout of 5 s", "timeout"),
    ("OrderNotFound: order 3fa85f64-5717-4562-b3fc-2c963f66afa6 not found", "order"),
    ("OrderNotFound: order 9c1e2d3f-0000-4562-b3fc-2c963f66afa6 not found", "order"),
    ("RuntimeError: lock held by <Worker object at 0x7f3a9c2e1d40> since 2026-11-30T21:14:00Z", "lock"),
    ("RuntimeError: lock held by <Worker object at 0x7f00aa11bb22> since 2026-11-29 03:00:01.5+00:00", "lock"),
    ("Poison: delivered 3 times (MAX_DELIVERIES=3) without an outcome; last consumer web-12-4471", "poison"),
    ("Poison: delivered 4 times (MAX_DELIVERIES=4) without an outcome; last consumer web-7-88", "poison"),
    ("PaymentDeclined: trace 4bf92f35e1 declined by Payrail", "payrail"),
    ("PaymentDeclined: trace 7f3a9c2e00 declined by Payrail", "payrail"),
    ("ReplayConflict: entry 1758203641877-0 was replayed already", "conflict"),
    ("ReplayConflict: entry 1758203641999-12 was replayed already", "conflict"),
    ("ValueError: can't render seat 'A' of row\n  12", "cant"),
    ("ValueError: can't render seat 'B' of row 7", "cant"),
    ("ZeroDivisionError: division by zero", "zero"),
    ("MalformedJob: the entry has no 'kind' field (fields: 'order_id, attempts')", "nokind"),
    ("UnknownKind: 'render_ticket' is not a kind this worker knows (known: render_tickets, send_email)", "unknown"),
]


def test_real_errors_fall_into_their_groups() -> None:
    groups: dict[str, set[str]] = {}
    for error, group in REAL_ERRORS:
        groups.setdefault(group, set()).add(signature(error))
    assert all(len(signatures) == 1 for signatures in groups.values()), groups
    distinct = [next(iter(s)) for s in groups.values()]
    assert len(set(distinct)) == len(distinct), "two different failures share a signature"


def test_signature_reads_like_the_error() -> None:
    assert signature(REAL_ERRORS[0][0]) == "SeatLabelInvalid: <str> is not a row letter and a seat number"
    assert (
        signature(REAL_ERRORS[3][0])
        == "ConnectionError: Error <num> connecting to <num>.<num>:<num>. Connection refused."
    )
    assert signature("RuntimeError: at 0x7f3a9c2e1d40") == "RuntimeError: at <hex>"
    assert signature("ValueError: can't  go\n\tthere") == "ValueError: can't go there"
    assert signature("x" * 1000) == "x" * 300


def test_error_type_is_the_exception_name() -> None:
    assert error_type("SeatLabelInvalid: '14-C' is not ...") == "SeatLabelInvalid"
    assert error_type("psycopg.errors.UniqueViolation: duplicate key") == "psycopg.errors.UniqueViolation"
    assert error_type("ZeroDivisionError") == "ZeroDivisionError"
    assert error_type("something odd happened: yes") == ""
    assert error_type("") == ""


@given(st.text(max_size=400))
def test_a_signature_is_its_own_signature(error: str) -> None:
    once = signature(error)
    assert signature(once) == once
    assert check_signature(once) == once if once else True


def test_check_signature_says_what_a_good_one_looks_like() -> None:
    with pytest.raises(OpslibError, match=r"is not a signature .* its signature is 'SeatLabelInvalid: <str> is"):
        check_signature("SeatLabelInvalid: '14-C' is not a row letter and a seat number")
    with pytest.raises(OpslibError, match="non-empty string"):
        check_signature("")
    with pytest.raises(OpslibError, match="non-empty string"):
        check_signature(42)


def _dead(errors: list[tuple[str, str]]) -> pd.DataFrame:
    raw = [
        (f"17582036418{number:02d}-0", {"kind": kind, "error": error, "attempts": "2"})
        for number, (kind, error) in enumerate(errors)
    ]
    return dead_to_frame(raw)


def test_failure_groups_count_kinds_and_examples() -> None:
    dead = _dead(
        [
            ("send_email", "HTTPStatusError: '503'"),
            ("render_tickets", "SeatLabelInvalid: '14-C' is bad"),
            ("render_tickets", "SeatLabelInvalid: '7-A' is bad"),
            ("reprint", "SeatLabelInvalid: '3-B' is bad"),
            ("send_email", "ZeroDivisionError: division by zero"),
        ]
    )
    groups = failure_groups_to_frame(dead)
    assert list(groups.columns) == list(GROUP_COLUMNS)
    assert groups.dtypes.astype(str).to_dict() == GROUP_COLUMNS
    assert list(groups["count"]) == [3, 1, 1]
    top = groups.iloc[0]
    assert top["signature"] == "SeatLabelInvalid: <str> is bad"
    assert top["error_type"] == "SeatLabelInvalid"
    assert top["kinds"] == "render_tickets, reprint"
    assert top["example_id"] == "1758203641803-0"
    assert top["example_error"] == "SeatLabelInvalid: '3-B' is bad"
    assert top["first_seen"] == entry_times(["1758203641801-0"])[0]
    assert top["last_seen"] == entry_times(["1758203641803-0"])[0]
    # ties in count: the group seen first comes first
    assert list(groups["error_type"][1:]) == ["HTTPStatusError", "ZeroDivisionError"]


def test_failure_groups_of_nothing_has_the_columns() -> None:
    groups = failure_groups_to_frame(_dead([]))
    assert groups.empty
    assert groups.dtypes.astype(str).to_dict() == GROUP_COLUMNS
