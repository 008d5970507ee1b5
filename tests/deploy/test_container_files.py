"""The Dockerfile (hadolint-clean, the facts operators rely on) and compose.yaml (consistent with the
Dockerfile, the worker's settings and the stand-ins). ``make container-test`` builds and runs the image."""

from __future__ import annotations

import importlib.util
import re
import subprocess
from typing import Any

import pytest
import yaml

from stagedoor.settings import StagedoorSettings
from tests.deploy.helpers import require
from tests.helpers import ROOT
from worker.settings import SETTINGS, declared

DOCKERFILE = (ROOT / "Dockerfile").read_text()


def stages() -> dict[str, str]:
    """Each stage's name and its instructions (the text up to the next FROM)."""
    parts = re.split(r"^FROM ", DOCKERFILE, flags=re.MULTILINE)[1:]
    return {re.match(r"\S+ AS (\S+)", part).group(1): part for part in parts}  # type: ignore[union-attr]


def test_hadolint_finds_nothing() -> None:
    done = subprocess.run(
        [str(require("hadolint")), "--no-color", "Dockerfile"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


def test_the_worker_image_is_the_default_target_and_runs_as_a_non_root_user() -> None:
    official_slim = re.search(r"^ARG BASE=python:3\.1\d+(\.\d+)?-slim", DOCKERFILE, flags=re.MULTILINE)
    assert official_slim, "BASE defaults to an official slim Python image"
    names = list(stages())
    assert names[-1] == "worker", f"the last stage (docker build's default) is {names[-1]}, not worker"
    worker = stages()["worker"]
    user = re.search(r"^USER (\d+):(\d+)$", worker, flags=re.MULTILINE)
    assert user and int(user.group(1)) > 0, "the worker stage runs as a numeric non-root user"
    assert 'ENTRYPOINT ["python", "-m", "worker"]' in worker
    assert re.search(r'^\s+CMD \["python", "-m", "worker", "health"\]$', worker, flags=re.MULTILINE)
    assert "PIP_CERT" not in worker, "the CA bundle argument stays in the build stages"


def test_the_build_context_leaves_out_venvs_data_and_git() -> None:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    assert "*" in lines, ".dockerignore starts from nothing and lists what the build needs"
    for needed in ("pyproject.toml", "uv.lock", "README.md", "worker/", "opslib/", "stagedoor/"):
        assert f"!{needed}" in lines


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())


def test_compose_runs_the_stack_the_readme_describes(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"redis", "postgres", "mail", "payrail", "worker", "jupyter"}
    assert int(services["redis"]["image"].split(":")[1]) >= 7
    assert int(services["postgres"]["image"].split(":")[1]) >= 16
    assert any(v.endswith(":/var/lib/postgresql/data") for v in services["postgres"]["volumes"])
    assert services["worker"]["deploy"]["replicas"] == 2
    for name in ("mail", "payrail", "worker", "jupyter"):
        target = services[name]["build"]["target"]
        assert target in stages(), f"{name} builds Dockerfile stage {target!r}, which does not exist"
    notebooks = services["jupyter"]["volumes"][0].split(":")[0]
    assert (ROOT / notebooks).is_dir()


def test_the_base_image_is_pinned_by_digest_and_uv_by_hash() -> None:
    base = re.search(r"^ARG BASE=(\S+)$", DOCKERFILE, flags=re.MULTILINE)
    assert base and re.fullmatch(r"python:[\w.-]+@sha256:[0-9a-f]{64}", base.group(1)), "tag@sha256:digest"
    requirements = (ROOT / "deploy/uv-requirements.txt").read_text()
    assert re.search(r"^uv==\d+\.\d+\.\d+ \\$", requirements, flags=re.MULTILINE), "one exact version"
    assert len(re.findall(r"--hash=sha256:[0-9a-f]{64}", requirements)) >= 2, "each Linux wheel's hash"
    build = stages()["build"]
    assert "--require-hashes" in build and "/opt/uv-requirements.txt" in build
    assert "!deploy/uv-requirements.txt" in (ROOT / ".dockerignore").read_text().splitlines()
    worker = stages()["worker"]
    assert "METRICS_HOST=0.0.0.0" in worker, "the image serves /metrics beyond loopback, by its own setting"


def test_compose_takes_secrets_from_files_and_has_no_default_password(compose: dict[str, Any]) -> None:
    lines = (ROOT / "compose.yaml").read_text().splitlines()
    text = "\n".join(line for line in lines if not line.lstrip().startswith("#"))  # the recipe in comments
    assert not re.search(r"(PASSWORD|TOKEN|SECRET)[A-Z_]*:?\s*\$\{[A-Z_]+:-", text), "a secret with a default"
    assert not re.search(r"postgresql://[^:/\s]+:[^@\s]+@", text), "a password inline in a URL"
    assert "${JUPYTER_TOKEN:?" in text
    services = compose["services"]
    assert set(compose["secrets"]) == {"postgres_password", "database_url"}
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD_FILE"] == "/run/secrets/postgres_password"
    for name in ("worker", "jupyter"):
        assert services[name]["environment"]["DATABASE_URL_FILE"] == "/run/secrets/database_url"
        assert services[name]["secrets"] == ["database_url"]
    assert services["worker"]["environment"]["METRICS_HOST"] == "0.0.0.0"


def test_the_worker_environment_names_only_real_settings(compose: dict[str, Any]) -> None:
    worker = compose["services"]["worker"]
    specs = [*SETTINGS.values(), *declared(StagedoorSettings).values()]
    known = {s.env for s in specs} | {s.file_env for s in specs if s.secret}
    assert set(worker["environment"]) <= known, f"unknown settings: {set(worker['environment']) - known}"
    grace_s = float(worker["environment"]["SHUTDOWN_GRACE_S"])
    assert float(worker["stop_grace_period"].removesuffix("s")) > grace_s, "SIGKILL only after the drain's grace"


def test_the_worker_reaches_each_stand_in_where_it_listens(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert importlib.util.find_spec("stagedoor.standins.__main__") is not None
    for setting, service in (("MAIL_API_URL", "mail"), ("PAYRAIL_URL", "payrail")):
        url = services["worker"]["environment"][setting]
        host, port = re.fullmatch(r"http://([a-z]+):(\d+)", url).groups()  # type: ignore[union-attr]
        command = services[service]["entrypoint"]
        assert host == service and command[:4] == ["python3", "-m", "stagedoor.standins", service]
        assert command[command.index("--port") + 1] == port and command[command.index("--host") + 1] == "0.0.0.0"


def test_the_compose_test_override_keeps_every_service_on_the_host_network(compose: dict[str, Any]) -> None:
    """``make compose-test``'s override: compose.yaml's services only, each on the host network, and no list
    of compose.yaml replaced (podman-compose 1.0.3 appends lists where docker compose replaces some)."""
    override = yaml.safe_load((ROOT / "deploy/compose-test/override.yaml").read_text())
    assert set(override) == {"services"}, "no networks or volumes of its own"
    services = compose["services"]
    assert set(override["services"]) == set(services)
    for name, service in override["services"].items():
        assert service["network_mode"] == "host", f"{name} is not on the host network"
        for key, value in service.items():
            assert not (isinstance(value, list) and key in services[name]), f"{name}.{key} replaces a list"
