"""No secret is ever shown: each shape of a secret-bearing URL through the worker, health, enqueue,
migrate, every opslib CLI command and the runbook; settings from files; reprs."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis

from opslib.cli import main as opslib_main
from stagedoor.settings import StagedoorSettings
from tests.helpers import ROOT
from worker.errors import SettingsError
from worker.redact import redact
from worker.settings import Settings

SECRET = "Sekr3tPw9"
KINDS = "tests.queue.kinds_basic"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("redis://app:Sekr3tPw9@h:6379/0", "redis://app:***@h:6379/0"),
        ("rediss://h/0?ssl_keyfile_password=Sekr3tPw9&db=1", "rediss://h/0?ssl_keyfile_password=***&db=1"),
        ("postgresql://h/db?sslmode=require&password=Sekr3tPw9", "postgresql://h/db?sslmode=require&password=***"),
        ("postgresql+psycopg://u:Sekr3tPw9@h/db", "postgresql+psycopg://u:***@h/db"),
        ("htps://u:Sekr3tPw9@h", "htps://u:***@h"),
        ("redis://u:Sekr/3t#Pw9@h:1/0", "redis://u:***@h:1/0"),  # no parser takes it whole
        ("https://Sekr3tPw9@api.example/x", "https://***@api.example/x"),  # a token as the user
        ("host=h password='Sekr3t Pw9' user=u", "host=h password=*** user=u"),  # libpq's key=value form
        ('missing "=" after "redis://a:Sekr3tPw9@c" in string', 'missing "=" after "redis://a:***@c" in string'),
        ("redis://127.0.0.1:6379/0 is down", "redis://127.0.0.1:6379/0 is down"),  # nothing to hide
    ],
)
def test_redact_hides_every_shape(text: str, shown: str) -> None:
    assert redact(text) == shown


def test_settings_read_secrets_from_files_and_their_repr_shows_none(tmp_path: Path) -> None:
    (tmp_path / "redis").write_text(f"redis://worker:{SECRET}@127.0.0.1:6379/0\n")
    (tmp_path / "mail").write_text(f"https://api:{SECRET}@mail.example/v1\n")
    settings = Settings.from_env(
        {"REDIS_URL_FILE": str(tmp_path / "redis"), "DATABASE_URL": f"postgresql://u:{SECRET}@h/db"}
    )
    assert settings.redis_url == f"redis://worker:{SECRET}@127.0.0.1:6379/0"
    assert SECRET not in repr(settings)
    assert "redis://worker:***@127.0.0.1:6379/0" in repr(settings)
    own = StagedoorSettings.from_env({"MAIL_API_URL_FILE": str(tmp_path / "mail")})
    assert own.mail_api_url.endswith("mail.example/v1")
    assert SECRET not in repr(own)

    # Rotated in the file: current() reads it again, the settings object stays as it was.
    (tmp_path / "redis").write_text("redis://worker:NewOne@127.0.0.1:6379/0")
    assert settings.current("redis_url") == "redis://worker:NewOne@127.0.0.1:6379/0"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"REDIS_URL": "redis://h/0", "REDIS_URL_FILE": "/x"}, "both REDIS_URL and REDIS_URL_FILE are set"),
        ({"DATABASE_URL_FILE": "/no/such/file"}, "DATABASE_URL_FILE=/no/such/file cannot be read"),
    ],
)
def test_a_secret_file_problem_is_one_line(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings.from_env(env)


# ----------------------------------------------------------------- every shape through every command


@pytest.fixture
def acl_user(r: redis.Redis) -> Iterator[str]:
    """A Redis user of this test's own whose password is not SECRET (removed afterwards)."""
    name = f"test-secrets-{uuid.uuid4().hex[:8]}"
    r.acl_setuser(name, enabled=True, passwords=["+right-password"], keys=["*"], channels=["*"], commands=["+@all"])
    yield name
    r.acl_deluser(name)


def redis_shapes(redis_url: str, user: str) -> dict[str, str]:
    where = urlsplit(redis_url).netloc.rpartition("@")[2]
    return {
        "bad scheme": f"htps://u:{SECRET}@{where}/0",
        "query password": f"redis://127.0.0.1:1/0?password={SECRET}",
        "query ssl_keyfile_password": f"rediss://127.0.0.1:1/0?ssl_keyfile_password={SECRET}",
        "wrong password": f"redis://{user}:{SECRET}@{where}/0",
        "unreachable host": f"redis://u:{SECRET}@127.0.0.1:1/0",
        "unparseable": f"redis://u:{SECRET[:4]}/{SECRET[4:]}@127.0.0.1:1/0",
    }


POSTGRES_SHAPES = {
    "SQLAlchemy-style URL": f"postgresql+psycopg://postgres:{SECRET}@127.0.0.1:5432/test",
    "query password": f"postgresql://postgres@127.0.0.1:1/test?password={SECRET}",
    "unreachable host": f"postgresql://postgres:{SECRET}@127.0.0.1:1/test",
    "bad scheme": f"postgres-ql://postgres:{SECRET}@127.0.0.1:1/test",
}


def shown_secret(text: str) -> bool:
    return SECRET in text or SECRET[4:] in text


def shape_envs(redis_url: str, user: str, archive_url: str) -> Iterator[tuple[str, dict[str, str]]]:
    for name, url in redis_shapes(redis_url, user).items():
        yield f"REDIS_URL {name}", {"REDIS_URL": url, "ARCHIVE_URL": archive_url}
    for name, url in POSTGRES_SHAPES.items():
        yield f"DATABASE_URL {name}", {"REDIS_URL": redis_url, "DATABASE_URL": url, "ARCHIVE_URL": url}


WORKER_COMMANDS = (["--burst"], ["health"], ["enqueue", "noop", "a=1"], ["migrate"])
OPSLIB_COMMANDS = (
    ["stats"],
    ["dead"],
    ["groups"],
    ["pending"],
    ["replay", "1-0", "--yes"],
    ["discard", "1-0", "--reason", "test", "--yes"],
    ["status", "b-0"],
    ["show", "1-0"],
    ["delayed"],
    ["run-now", "j-0", "--yes"],
    ["cancel", "j-0", "--reason", "test", "--yes"],
)


def test_no_command_shows_a_secret_in_any_shape(
    redis_url: str,
    prefix: str,
    archive_url: str,
    acl_user: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    base = {k: v for k, v in os.environ.items() if not k.endswith(("_URL", "_URL_FILE"))}
    base.update({"PYTHONPATH": str(ROOT), "QUEUE_PREFIX": prefix, "WORKER_KINDS": KINDS, "BLOCK_MS": "100"})
    tried = 0
    for shape, env in shape_envs(redis_url, acl_user, archive_url):
        for args in WORKER_COMMANDS:
            done = subprocess.run(
                [sys.executable, "-m", "worker", *args],
                cwd=ROOT,
                env={**base, **env, "WORKER_DATA_DIR": str(tmp_path / "data")},
                capture_output=True,
                text=True,
                timeout=60,
            )
            if shape.startswith("REDIS_URL") and args != ["migrate"]:  # (an archive away is not fatal)
                assert done.returncode != 0, f"{shape}: worker {args} succeeded"
            assert not shown_secret(done.stdout + done.stderr), f"{shape}: worker {args} showed it:\n{done.stderr}"
            assert "Traceback" not in done.stderr, f"{shape}: worker {args}:\n{done.stderr}"
            tried += 1
        for name in ("REDIS_URL", "DATABASE_URL", "ARCHIVE_URL"):
            monkeypatch.delenv(name, raising=False)
        for name, value in {**env, "QUEUE_PREFIX": prefix}.items():
            monkeypatch.setenv(name, value)
        for args in OPSLIB_COMMANDS:
            code = opslib_main(args, stdin=io.StringIO(""))
            out, err = capfd.readouterr()
            assert not shown_secret(out + err), f"{shape}: opslib {args} showed it:\n{out}{err}"
            tried += 1
            if shape.startswith("REDIS_URL") or args[0] in ("show", "status"):
                assert code != 0, f"{shape}: opslib {args} succeeded:\n{out}"
    assert tried == 10 * (len(WORKER_COMMANDS) + len(OPSLIB_COMMANDS))


@pytest.mark.parametrize("shape", ["REDIS_URL query password", "DATABASE_URL SQLAlchemy-style URL"])
def test_the_runbook_shows_no_secret(
    shape: str, redis_url: str, prefix: str, archive_url: str, acl_user: str, tmp_path: Path
) -> None:
    env = dict(shape_envs(redis_url, acl_user, archive_url))[shape]
    base = {k: v for k, v in os.environ.items() if not k.endswith(("_URL", "_URL_FILE"))}
    done = subprocess.run(
        [sys.executable, "-m", "opslib", "runbook", "noop", "--out", str(tmp_path)],
        cwd=ROOT,
        env={**base, **env, "PYTHONPATH": str(ROOT), "QUEUE_PREFIX": prefix},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 1, done.stderr
    assert not shown_secret(done.stdout + done.stderr), done.stderr
    assert "Traceback" not in done.stderr


def test_enqueue_health_and_opslib_read_urls_from_files(
    redis_url: str,
    prefix: str,
    archive_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "redis_url").write_text(redis_url + "\n")
    (tmp_path / "archive_url").write_text(archive_url)
    files = {"REDIS_URL_FILE": str(tmp_path / "redis_url"), "ARCHIVE_URL_FILE": str(tmp_path / "archive_url")}
    base = {k: v for k, v in os.environ.items() if not k.endswith(("_URL", "_URL_FILE"))}
    env = {**base, **files, "PYTHONPATH": str(ROOT), "QUEUE_PREFIX": prefix, "WORKER_KINDS": KINDS}
    enqueued = subprocess.run(
        [sys.executable, "-m", "worker", "enqueue", "noop"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert enqueued.returncode == 0, enqueued.stderr
    health = subprocess.run(
        [sys.executable, "-m", "worker", "health"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    # It reached Redis (no worker ran on this queue, so it is unhealthy for that reason, not a connection).
    assert health.stdout.startswith("unhealthy: consumer group workers does not exist"), health.stdout + health.stderr
    for name in ("REDIS_URL", "DATABASE_URL", "ARCHIVE_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {**files, "QUEUE_PREFIX": prefix}.items():
        monkeypatch.setenv(name, value)
    assert opslib_main(["stats"]) == 0
    stats = capfd.readouterr().out.split()
    assert stats[stats.index("stream_length") + 1] == "1"  # the job enqueued above


@pytest.mark.parametrize("command", [["-m", "worker", "--burst"], ["-m", "stagedoor", "migrate"]])
def test_an_applications_postgresql_away_at_start_is_one_line_without_the_password(
    redis_url: str, prefix: str, tmp_path: Path, command: list[str]
) -> None:
    """Stagedoor's lifespan checks its tables at start; its DATABASE_URL not answering is one line (libpq's
    two-line text folded), exit 1, neither traceback nor password."""
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_URL", "_URL_FILE"))}
    env.update(
        PYTHONPATH=str(ROOT),
        QUEUE_PREFIX=prefix,
        REDIS_URL=redis_url,
        DATABASE_URL=POSTGRES_SHAPES["unreachable host"],
        ARCHIVE_URL="off",
        WORKER_KINDS="stagedoor.kinds",
        WORKER_DATA_DIR=str(tmp_path),
    )
    done = subprocess.run([sys.executable, *command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and not shown_secret(done.stdout + done.stderr)
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: ") and "Connection refused" in line and "Is the server running" in line, line
