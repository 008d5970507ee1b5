"""One function hides the secrets of every URL shown anywhere: :func:`redact`.

Messages, log lines, reprs and the CLI's errors pass each URL (or a whole
message that may hold one, such as a driver's exception text) through it:

- the password of a URL's userinfo, whatever the scheme
  (``redis://app:s3cret@host`` -> ``redis://app:***@host``); a userinfo
  without a colon is hidden whole (some services put a token there);
- ``password=``, ``ssl_keyfile_password=`` and the like, in a query string or
  in libpq's ``key=value`` form, quoted or not;
- strings no URL parser accepts: the userinfo is taken to run to the last
  ``@`` of the word, so a password holding ``/``, ``#`` or ``@`` is hidden too.

It hides more than it must rather than less: the host and the path after a
stray ``@`` may go as well.
"""

from __future__ import annotations

import re

MASK = "***"

# A URL's scheme and its userinfo up to the last "@" of the word (a word ends at space or a quote).
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^\s'\"<>]*)@")
# password=..., ssl_keyfile_password=..., passwd=..., token=... in a query string or a libpq conninfo.
_SECRET_PARAM = re.compile(
    r"(?P<name>\b[A-Za-z_]*(?:password|passwd|passphrase|secret|token)\s*=\s*)"
    r"(?P<value>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^&\s'\";,)]*)",
    re.IGNORECASE,
)


def _hide_userinfo(match: re.Match[str]) -> str:
    userinfo = match.group("userinfo")
    user, colon, _password = userinfo.partition(":")
    shown = f"{user}:{MASK}" if colon else MASK
    return f"{match.group('scheme')}{shown}@"


def redact(text: str) -> str:
    """``text`` with the secrets of every URL or connection string in it replaced by ``***``."""
    text = _USERINFO.sub(_hide_userinfo, text)
    return _SECRET_PARAM.sub(lambda m: f"{m.group('name')}{MASK}", text)


def one_line(message: object) -> str:
    """``message`` (an exception or text) on one line: a driver's text may hold newlines and tabs (libpq's
    "Is the server running...?" hint), and an error the CLI or a log shows is one line."""
    return " ".join(str(message).split())
