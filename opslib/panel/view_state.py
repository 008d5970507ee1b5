"""What one view of the dashboard is, as a value and as the query string of its link.

A view is the tab shown, that tab's filters (kind, queue, search, From, To),
what is selected in it (entry or job ids, and on the dead tab the failure
group) and the flow chart's window. :func:`view_query` writes it as the query
string the page's URL carries (the dashboard puts it there as the view
changes); :func:`parse_view` reads it back when the page opens, so that a link
from an alert or a colleague opens the same view in Voilà (which hands the
page's query string to the kernel as ``QUERY_STRING``).

Only the names of :data:`URL_NAMES` are read; any other parameter (Voilà's
``token``, ``template``, ``theme``) is left alone and never written into a
link, so a shared link carries no token. A value that cannot be a view (an
unknown tab or window) is one line saying what is right, and the view falls
back to its default there; filters are checked where they are applied, by
the tab, which clears its list and says why.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from urllib.parse import parse_qs, urlencode

TABS = ("waiting", "running", "delayed", "dead", "archived", "flow")
"""The dashboard's tabs, in their order on the page."""
DEFAULT_TAB = "dead"
WINDOWS = ("1h", "6h", "24h", "7d")
"""The flow chart's windows (back from now)."""
DEFAULT_WINDOW = "1h"
URL_NAMES = {
    "tab": "tab",
    "kind": "kind",
    "queue": "queue",
    "search": "q",
    "since": "from",
    "until": "to",
    "group": "group",
    "selected": "sel",
    "window": "window",
}
"""Each view field and its name in the query string."""
MAX_SELECTED = 200
"""A link names at most this many selected ids (the entry list's page)."""


@dataclass(frozen=True)
class ViewState:
    """One view: the tab, its filters, its selection and the flow's window (empty text: not set)."""

    tab: str = DEFAULT_TAB
    kind: str = ""
    queue: str = ""
    search: str = ""
    since: str = ""
    until: str = ""
    group: str = ""
    selected: tuple[str, ...] = field(default_factory=tuple)
    window: str = DEFAULT_WINDOW


def view_query(view: ViewState) -> str:
    """The query string of ``view`` (without ``?``): only what differs from the default view."""
    default = ViewState()
    pairs = []
    for name, key in URL_NAMES.items():
        value = getattr(view, name)
        if value == getattr(default, name) and name != "tab":
            continue
        pairs.append((key, ",".join(value[:MAX_SELECTED]) if name == "selected" else value))
    return urlencode(pairs)


def parse_view(query: str | None) -> tuple[ViewState, list[str]]:
    """The view a query string names, and one line per value that could not be used (then left at its default)."""
    values = {key: found[-1] for key, found in parse_qs((query or "").lstrip("?"), keep_blank_values=True).items()}
    fields: dict[str, object] = {}
    for name, key in URL_NAMES.items():
        if key in values:
            fields[name] = values[key].strip()
    selected = str(fields.pop("selected", ""))
    fields["selected"] = tuple(part for part in selected.split(",") if part.strip())[:MAX_SELECTED]
    view, problems = ViewState(**fields), []  # type: ignore[arg-type]
    if view.tab not in TABS:
        problems.append(f"tab={view.tab!r} in the link is not a tab; use one of {', '.join(TABS)}")
        view = replace(view, tab=DEFAULT_TAB)
    if view.window not in WINDOWS:
        problems.append(f"window={view.window!r} in the link is not a window; use one of {', '.join(WINDOWS)}")
        view = replace(view, window=DEFAULT_WINDOW)
    return view, problems
