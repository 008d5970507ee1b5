"""How a setting is declared, read and shown: the framework behind :class:`worker.settings.Settings`.

A setting is a dataclass field made by :func:`setting` (environment name,
default, parser, help). From those declarations alone come the parsing
(:func:`from_env`, with a secret's ``<NAME>_FILE`` form and :func:`current`
to read it again), the repr with secrets redacted (:func:`settings_repr`), the
``--help`` table (:func:`settings_help`) and the docs' table
(:func:`settings_markdown`). The worker's settings are declared in
:mod:`worker.settings`, an application's the same way (``myapp.settings``);
the parsers they use are :mod:`worker.setting_parsers`.
"""

from __future__ import annotations

import dataclasses
import html
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from worker.errors import SettingsError
from worker.redact import redact, remember_secret

Parser = Callable[[str, str], Any]
"""Parses a setting's raw text; called with the setting's name (for its one-line refusal) and the text."""


@dataclass(frozen=True)
class Setting:
    """One setting: where it is read from, its default, how it is parsed and what it means."""

    env: str
    default: str
    parse: Parser
    help: str
    secret: bool = False

    @property
    def file_env(self) -> str:
        """The variable naming a file that holds a secret setting's value (``REDIS_URL_FILE``)."""
        return f"{self.env}_FILE"


def setting(env: str, default: str, parse: Parser, help: str, *, secret: bool = False) -> Any:
    """A dataclass field read from the environment variable ``env`` (``default`` when unset); a
    ``secret`` one also from the file that ``<env>_FILE`` names."""
    return dataclasses.field(metadata={"setting": Setting(env, default, parse, help, secret)})


def read_secret_file(file_env: str, path: str) -> str:
    """The stripped content of the file ``file_env`` names, or one line saying why it cannot be read."""
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        raise SettingsError(
            f"{file_env}={path} cannot be read ({exc.strerror}); mount the secret there or unset {file_env}"
        ) from None


def raw_value(spec: Setting, env: Mapping[str, str]) -> tuple[str, str]:
    """``(value, file)``: the value of ``spec`` from ``env``, or from its file (then also the file's
    path, to read again later). Both set is refused: which one wins would be a guess. A secret's value
    is remembered (:func:`worker.redact.remember_secret`): it is hidden wherever it shows up from now on,
    a handler's error included."""
    path = env.get(spec.file_env, "").strip() if spec.secret else ""
    if not path:
        value = env.get(spec.env, spec.default)
    elif env.get(spec.env, ""):
        raise SettingsError(f"both {spec.env} and {spec.file_env} are set; set only one of them")
    else:
        value = read_secret_file(spec.file_env, path)
    if spec.secret:
        remember_secret(value)
    return value, path


S = TypeVar("S")


SECRET_FILES = "secret_files"
"""The field of a settings class that keeps ``{field name: path}`` of the secrets read from files."""


def from_env(cls: type[S], env: Mapping[str, str] | None = None, overrides: Mapping[str, str] | None = None) -> S:
    """Build the settings dataclass ``cls`` from ``env`` (default ``os.environ``); ``overrides`` win."""
    env = os.environ if env is None else env
    overrides = overrides or {}
    values: dict[str, Any] = {}
    files: dict[str, str] = {}
    for name, spec in declared(cls).items():
        raw = overrides.get(name)
        if raw is None:
            raw, path = raw_value(spec, env)
            if path:
                files[name] = path
        values[name] = spec.parse(spec.file_env if name in files else spec.env, raw)
    if any(f.name == SECRET_FILES for f in dataclasses.fields(cls)):  # type: ignore[arg-type]
        values[SECRET_FILES] = files
    return cls(**values)


def declared(cls: type) -> dict[str, Setting]:
    """Field name -> :class:`Setting`, in declaration order."""
    return {f.name: f.metadata["setting"] for f in dataclasses.fields(cls) if "setting" in f.metadata}


def current(settings: Any, name: str) -> str:
    """The value of the secret setting ``name`` now: read again from its file when it came from one
    (a rotated password), else as it was given."""
    path = getattr(settings, SECRET_FILES).get(name)
    if not path:
        return str(getattr(settings, name))
    spec = declared(type(settings))[name]
    value = read_secret_file(spec.file_env, path)
    remember_secret(value)  # a rotated password is hidden too
    return str(spec.parse(spec.file_env, value))


def settings_repr(settings: Any) -> str:
    """``Name(field=value, ...)`` with every secret setting redacted (the repr of a settings class)."""
    shown = []
    for name, spec in declared(type(settings)).items():
        value = getattr(settings, name)
        shown.append(f"{name}={redact(value) if spec.secret else value!r}")
    return f"{type(settings).__name__}({', '.join(shown)})"


def settings_help(cls: type, title: str = "settings (environment variables):") -> str:
    """The plain-text settings table (``--help``)."""
    specs = declared(cls).values()
    width = max(len(s.env) for s in specs)
    lines = [title]
    for s in specs:
        lines.append(f"  {s.env:<{width}}  default {s.default or '(empty)'}: {s.help}{file_note(s)}")
    return "\n".join(lines)


def settings_markdown(cls: type) -> str:
    """The settings table in Markdown, as the docs carry it (``<host>`` escaped, so that it shows)."""
    rows = ["| setting | default | meaning |", "| --- | --- | --- |"]
    for s in declared(cls).values():
        default = f"`{s.default}`" if s.default else "(empty)"
        meaning = html.escape(s.help + file_note(s), quote=False).replace("|", "/")
        rows.append(f"| `{s.env}` | {default} | {meaning} |")
    return "\n".join(rows)


def file_note(spec: Setting) -> str:
    """What the help says of a secret's ``_FILE`` form."""
    return f" (or {spec.file_env}: a file holding it, read again at each new connection)" if spec.secret else ""
