"""environment.yml parses, each conda spec is valid (py-rattler's MatchSpec), and it names exactly the
dependencies of pyproject.toml an analyst needs (the core and the extras :data:`ANALYST_EXTRAS`), with the same
lower bounds.

No conda channel is reachable here, so the environment is never solved; this is what can be checked.
"""

from __future__ import annotations

import tomllib
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from rattler import MatchSpec

from tests.helpers import ROOT

#: A PyPI package, or one extra of it, and its conda-forge package where the names differ.
CONDA_NAME = {
    "redis": "redis-py",
    "prometheus-client": "prometheus_client",
    "matplotlib": "matplotlib-base",
    "psycopg[pool]": "psycopg-pool",
}
#: Extras that need no conda package (conda-forge's psycopg links conda-forge's libpq).
NO_CONDA_PACKAGE = {"psycopg[binary]"}
#: What every environment.yml has besides the project's dependencies.
CONDA_BASE = {"python", "pip"}
PROJECT_ITSELF = "-e ."
PROJECT = "stagedoor-jobs"
#: The analyst's environment: opslib, the notebooks, and the embedded servers of the `make run` stack.
ANALYST_EXTRAS = ("opslib", "notebook", "embedded")


@pytest.fixture(scope="module")
def environment() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "environment.yml").read_text())


def sections(environment: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The conda specs and the pip requirements."""
    conda = [d for d in environment["dependencies"] if isinstance(d, str)]
    pips = [d["pip"] for d in environment["dependencies"] if isinstance(d, dict)]
    assert len(pips) == 1, "one pip section"
    return conda, pips[0]


def pyproject_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    wanted = [*project["dependencies"], *(r for extra in ANALYST_EXTRAS for r in extras[extra])]
    return [req for req in map(Requirement, wanted) if canonicalize_name(req.name) != PROJECT]  # not its own extras


def conda_packages(req: Requirement) -> dict[str, str]:
    """The conda-forge packages that stand for one pyproject requirement, each with its version spec."""
    name = canonicalize_name(req.name)
    packages = {CONDA_NAME.get(name, name): str(req.specifier)}
    for extra in sorted(req.extras):
        key = f"{name}[{extra}]"
        if key in NO_CONDA_PACKAGE:
            continue
        assert key in CONDA_NAME, f"{key}: say in CONDA_NAME which conda package it is, or add it to NO_CONDA_PACKAGE"
        packages[CONDA_NAME[key]] = ""
    return packages


def test_it_is_a_conda_environment_from_conda_forge_with_python_3_11(environment: dict[str, Any]) -> None:
    assert environment["name"] == "stagedoor-jobs"
    assert environment["channels"] == ["conda-forge"]
    conda, pip = sections(environment)
    python = next(MatchSpec(spec) for spec in conda if MatchSpec(spec).name.normalized == "python")
    assert str(python.version) == ">=3.11"
    assert PROJECT_ITSELF in pip, "the project itself, editable"


def test_each_conda_spec_is_valid(environment: dict[str, Any]) -> None:
    conda, _pip = sections(environment)
    for spec in conda:
        MatchSpec(spec)  # raises InvalidMatchSpecError
        assert "::" not in spec, f"{spec}: the channel is conda-forge, named once under channels"


def test_it_names_the_dependencies_of_pyproject_nothing_missing_nothing_extra(environment: dict[str, Any]) -> None:
    conda, pip = sections(environment)
    in_conda = {MatchSpec(s).name.normalized: str(MatchSpec(s).version or "") for s in conda}
    in_pip = {canonicalize_name(r.name): r for r in (Requirement(p) for p in pip if p != PROJECT_ITSELF)}

    expected_conda: dict[str, str] = {name: in_conda[name] for name in CONDA_BASE}
    for req in pyproject_requirements():
        name = canonicalize_name(req.name)
        if name in in_pip:
            assert in_pip[name].specifier == req.specifier, f"pip {in_pip[name]} differs from pyproject's {req}"
            assert not set(conda_packages(req)) & set(in_conda), f"{req.name} is in both the conda and pip sections"
        else:
            expected_conda.update(conda_packages(req))
    missing = set(expected_conda) - set(in_conda)
    extra = set(in_conda) - set(expected_conda)
    assert not missing and not extra, f"conda section: missing {sorted(missing)}, not in pyproject {sorted(extra)}"
    pip_extra = set(in_pip) - {canonicalize_name(r.name) for r in pyproject_requirements()}
    assert not pip_extra, f"pip section: not in pyproject {sorted(pip_extra)}"
    for package, version in expected_conda.items():
        assert in_conda[package] == version, f"conda {package}{in_conda[package]}: pyproject asks {version or 'any'}"
