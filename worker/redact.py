"""One function hides the secrets in any text shown, stored or sent anywhere: :func:`redact`.

Messages, log lines, reprs, the CLI's errors, and what a failed job leaves
behind (its error, traceback, attempt log and span events, see
:mod:`worker.store.failures`) pass through it. It hides:

- the password of a URL's userinfo, whatever the scheme
  (``redis://app:s3cret@host`` -> ``redis://app:***@host``); a userinfo
  without a colon is hidden whole (some services put a token there); the
  schemeless and mistyped shapes too (``redis//app:s3cret@host``,
  ``app:s3cret@host``);
- ``Authorization`` and ``Proxy-Authorization`` headers (the scheme word
  stays), and ``Bearer``/``Basic`` tokens wherever they stand;
- parameters named ``password``, ``passwd``, ``secret``, ``token``,
  ``api_key``/``apikey``/``api-key``, ``access_key``, ``private_key``
  (any prefix: ``ssl_keyfile_password``, ``client_secret``, ``X-Api-Key``)
  in a query string, libpq's ``key=value`` form, JSON, a Python repr or a
  header (``name: value``), quoted or not;
- the values of the secrets this process was configured with
  (:func:`remember_secret`: the settings' URLs' passwords, their files'
  secrets), wherever they appear;
- what the application's ``REDACT_PATTERNS`` match (:func:`add_patterns`).

It hides more than it must rather than less: the host and the path after a
stray ``@`` may go as well, and a word after ``token:`` in prose.

:func:`capture` is what a failure's text goes through before it is kept: it
redacts, then cuts to a bound with a marker saying how much was cut and a
digest of the whole, reading a 20 MB message once (in slices: no copy of it).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from worker.errors import SettingsError

MASK = "***"
MIN_SECRET_CHARS = 4
"""A configured secret shorter than this is not searched for in text (it would mask every ``a``)."""
MARGIN_CHARS = 1024
""":func:`capture` redacts this much beyond the bound before it cuts, so a secret that straddles the cut is
still recognised; only a secret longer than this could show a part of itself."""
DIGEST_SLICE_CHARS = 1 << 16
""":func:`digest` encodes this many characters at a time (a slice, never a copy of the whole)."""

# A URL's scheme and its userinfo up to the last "@" of the word (a word ends at space or a quote).
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^\s'\"<>]*)@")
# The same without a well-formed scheme (``redis//u:pw@h``, ``redis:/u:pw@h``, ``u:pw@h``) at a word's start.
_LOOSE_USERINFO = re.compile(
    r"(?<![^\s'\"=(<,\[{])(?P<lead>[A-Za-z][A-Za-z0-9+.\-]*:?/{1,2}|/{1,2})?"
    r"(?P<user>[^\s'\"<>:/@]*):(?!/)(?P<password>[^\s'\"<>]*)@"
)
_AUTH_HEADER = re.compile(
    r"(?P<name>\b(?:proxy-)?authorization\\?['\"]?\s*[:=]\s*\\?['\"]?)"
    r"(?P<scheme>(?:bearer|basic|token|digest|negotiate|apikey|key)\s+)?(?P<value>[^\s'\"\\,;})\]]+)",
    re.IGNORECASE,
)
# "Bearer" in any case; "Basic" as a header writes it, before 8 base64 characters at least (not "basic auth").
_BEARER = re.compile(r"\b(?P<scheme>(?i:bearer)\s+|Basic\s+(?=[A-Za-z0-9+/=]{8}))(?P<value>[A-Za-z0-9\-._~+/]+=*)")
_NAMES = r"(?:password|passwd|passphrase|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key)"
# name=value, name: value, "name": "value", 'name': 'value', \"name\": \"value\" (JSON inside a string).
_SECRET_PARAM = re.compile(
    rf"(?P<name>(?<![A-Za-z0-9_.\-])[A-Za-z0-9_.\-]*{_NAMES}(?:\\?['\"])?\s*[:=]\s*)"
    r"(?P<value>\\\"(?:(?!\\\").)*\\\"|'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^&\s'\";,)}\]]*)",
    re.IGNORECASE,
)

_PARAM_WORDS = ("pass", "pwd", "secret", "token", "key")
"""A text holds none of these words: it has no parameter for :data:`_SECRET_PARAM` to hide."""

Patterns = tuple[re.Pattern[str], ...]
"""The application's own secret shapes (``REDACT_PATTERNS``)."""

_secrets: set[str] = set()
_patterns: list[re.Pattern[str]] = []


def _hide_userinfo(match: re.Match[str]) -> str:
    userinfo = match.group("userinfo")
    user, colon, _password = userinfo.partition(":")
    shown = f"{user}:{MASK}" if colon else MASK
    return f"{match.group('scheme')}{shown}@"


def _hide_value(match: re.Match[str]) -> str:
    value = match.group("value")
    # JSON's quotes stay (the text stays JSON); libpq's and a repr's single quotes go with the value.
    quote_ = next((q for q in ('\\"', '"') if value.startswith(q) and len(value) > len(q)), "")
    return f"{match.group('name')}{quote_}{MASK}{quote_}" if value else match.group(0)


def _hide_pattern(match: re.Match[str]) -> str:
    if match.re.groups and match.group(1) is not None:
        start, end = match.span(1)
        whole = match.group(0)
        return whole[: start - match.start()] + MASK + whole[end - match.start() :]
    return MASK


def redact(text: str) -> str:
    """``text`` with every secret the module docstring lists replaced by ``***``."""
    for secret in sorted(_secrets, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, MASK)
    lowered = text.lower()  # each pattern runs only where its word can be: most errors hold none of them
    if "@" in text:
        text = _USERINFO.sub(_hide_userinfo, text)
        text = _LOOSE_USERINFO.sub(lambda m: f"{m.group('lead') or ''}{m.group('user')}:{MASK}@", text)
    if "authorization" in lowered:
        text = _AUTH_HEADER.sub(lambda m: f"{m.group('name')}{m.group('scheme') or ''}{MASK}", text)
    if "bearer" in lowered or "basic" in lowered:
        text = _BEARER.sub(lambda m: f"{m.group('scheme')}{MASK}", text)
    if any(word in lowered for word in _PARAM_WORDS):
        text = _SECRET_PARAM.sub(_hide_value, text)
    for pattern in _patterns:
        text = pattern.sub(_hide_pattern, text)
    return text


def remember_secret(value: str) -> None:
    """Hide ``value``'s secret wherever it appears from now on: a URL's password and its query's
    password-like parameters, as written and percent-decoded; a bare token (no ``:``, ``/`` nor ``@``, e.g.
    read from a file) whole. A user name, a host or a colon-less userinfo is not a secret everywhere."""
    found: list[str] = []
    if any(mark in value for mark in ":/@?"):
        try:
            parts = urlsplit(value)
        except ValueError:
            return
        userinfo = parts.netloc.rpartition("@")[0]
        found.append(userinfo.partition(":")[2])
        found += [v for k, v in parse_qsl(parts.query) if re.search(_NAMES, k, re.IGNORECASE)]
    else:
        found.append(value.strip())
    for secret in found:
        for form in {secret, unquote(secret), quote(unquote(secret), safe="")}:
            if len(form) >= MIN_SECRET_CHARS:
                _secrets.add(form)


def parse_patterns(name: str, raw: str) -> Patterns:
    """The ``REDACT_PATTERNS`` setting: regular expressions (Python syntax) separated by spaces (write a
    space inside one as ``\\s`` or ``\\x20``); a match is hidden whole, or only its first group when the
    pattern has one. Reading the setting is what makes this process hide them (:func:`add_patterns`)."""
    patterns = []
    for text in raw.split():
        try:
            patterns.append(re.compile(text))
        except re.error as exc:
            raise SettingsError(
                f"{name} holds {text!r}, not a regular expression ({exc}); give Python regular expressions "
                "separated by spaces, e.g. sk_live_[A-Za-z0-9]+"
            ) from None
    add_patterns(patterns)
    return tuple(patterns)


def add_patterns(patterns: Iterable[re.Pattern[str]]) -> None:
    """Hide what ``patterns`` match from now on (the process's ``REDACT_PATTERNS``)."""
    for pattern in patterns:
        if pattern.pattern not in {p.pattern for p in _patterns}:
            _patterns.append(pattern)


def digest(text: str) -> str:
    """The first 16 hex digits of the SHA-256 of ``text`` (UTF-8): the same whole gives the same digest.
    Encoded a slice of :data:`DIGEST_SLICE_CHARS` at a time, so a 20 MB message is not copied whole again
    (UTF-8 encodes each character alone: the slices' bytes are the whole's)."""
    whole = hashlib.sha256()
    for start in range(0, len(text), DIGEST_SLICE_CHARS):
        whole.update(text[start : start + DIGEST_SLICE_CHARS].encode("utf-8", "replace"))
    return whole.hexdigest()[:16]


def capture(text: str, limit_bytes: int, *, keep_end: bool = False) -> str:
    """``text`` redacted and, when its UTF-8 is over ``limit_bytes``, cut to them with a marker saying how
    much was cut and a digest of the whole; ``keep_end`` keeps the end (a traceback's error) instead of
    the start. Only the kept part (and a margin) is redacted: a huge message is read once, by the digest."""
    part = text[-(limit_bytes + MARGIN_CHARS) :] if keep_end else text[: limit_bytes + MARGIN_CHARS]
    shown = redact(part)
    data = shown.encode("utf-8", "replace")
    if len(part) == len(text) and len(data) <= limit_bytes:
        return shown
    marker = "…[{:,} more characters; sha256 of the whole {}]"
    room = limit_bytes - len(marker.format(len(text), "0" * 16).encode())
    kept = (data[-room:] if keep_end else data[:room]).decode("utf-8", "ignore")
    marker = marker.format(max(len(text) - len(kept), 0), digest(text))
    return f"{marker}\n{kept}" if keep_end else kept + marker


def one_line(message: object) -> str:
    """``message`` (an exception or text) on one line: a driver's text may hold newlines and tabs (libpq's
    "Is the server running...?" hint), and an error the CLI or a log shows is one line."""
    return " ".join(str(message).split())
