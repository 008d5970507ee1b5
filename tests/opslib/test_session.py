"""The public call form of the moves: ``client=``, ``prefix=`` and ``conn=`` reach the move as one record,
and ``help()`` shows them; who acts and why is checked before any server is contacted."""

from __future__ import annotations

import inspect

import pytest

import opslib
from opslib.operator import Operator

MOVES_WITH_THE_ARCHIVE = (opslib.replay, opslib.replay_kind, opslib.discard, opslib.discard_kind, opslib.archive)


@pytest.mark.parametrize("function", MOVES_WITH_THE_ARCHIVE, ids=lambda f: f.__name__)
def test_the_signature_shown_is_the_public_one(function: object) -> None:
    shown = inspect.signature(function)  # type: ignore[arg-type]
    assert list(shown.parameters)[-3:] == ["client", "prefix", "conn"]
    assert "servers" not in shown.parameters
    assert all(shown.parameters[name].default is None for name in ("client", "prefix", "conn"))


def test_replay_kind_and_discard_kind_take_one_selections_filters() -> None:
    """The two ``_kind`` forms narrow a kind's dead letters by the same keywords, shown as ``help()`` shows
    a keyword of the function's own."""
    for function in (opslib.replay_kind, opslib.discard_kind):
        shown = inspect.signature(function).parameters
        assert {name: str(shown[name].annotation) for name in ("signature", "error_contains", "since")} == {
            "signature": "str | None",
            "error_contains": "str | None",
            "since": "object",
        }, function.__name__


def test_an_unknown_keyword_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match="on_progres"):
        opslib.replay("1-0", on_progres=print)


def test_who_and_why_are_checked_before_any_server_is_contacted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")  # nothing listens there
    with pytest.raises(opslib.OpslibError, match="discard needs a reason, got '  '"):
        opslib.discard_kind("render_tickets", reason="  ")
    with pytest.raises(opslib.OpslibError, match=r"by must be a non-empty string \(who acts\), got ''"):
        opslib.replay("1-0", by="")
    with pytest.raises(opslib.OpslibError, match="error_contains must be a non-empty string"):
        opslib.replay_kind("render_tickets", error_contains="")


def test_an_operator_record_is_checked_once_when_made() -> None:
    assert Operator.acting("pause", by=" ana ", reason=" seat map fix ") == Operator("ana", "seat map fix")
    assert Operator.acting("replay", by="ana", reason=None, required=False) == Operator("ana", None)
    with pytest.raises(opslib.OpslibError, match="throttle needs a reason"):
        Operator.acting("throttle", by="ana", reason=None)
