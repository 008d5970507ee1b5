"""The house rules that a reader relies on, checked on the source with ``ast``.

No class over 250 lines, no function over 60 and no function taking more than 8
parameters in ``worker/``, ``opslib/`` and ``stagedoor/`` (250 bounds a class, not
a module: a module may be longer); no import circle among their modules, even
through an import inside a function; no application named in the core;
benchmarks import no test code; the shared modules under ``tests/`` named one way
(``kinds_*`` for modules that declare job kinds, the module name ``helpers`` for
shared code).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from tests.helpers import ROOT

MAX_CLASS_LINES = 250
MAX_FUNCTION_LINES = 60
#: Counted as a caller sees them: ``self`` and ``cls`` left out, ``*args`` and ``**kwargs`` one each. More
#: belong in a record (opslib's ``Operator``, ``Selection``, ``Servers``; the settings) than in a signature.
MAX_PARAMETERS = 8
#: Offenders being rewritten elsewhere, each with why it may wait; an entry that no longer offends fails
#: the test, so the list only shrinks.
KNOWN_OFFENDERS: dict[str, str] = {}
#: Modules under tests/ that are neither tests, kinds nor shared code: a pytest plugin and two scripts.
OTHER_TEST_MODULES = {"conftest", "__init__", "nbval_stack", "refresh_outputs", "settings_tables"}


def sources(*packages: str) -> Iterator[Path]:
    for package in packages:
        yield from (p for p in sorted((ROOT / package).rglob("*.py")) if "__pycache__" not in p.parts)


def too_long(path: Path) -> Iterator[tuple[str, int, int]]:
    """``(name, lines, limit)`` of each class or function of ``path`` over its limit."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef):
            limit = MAX_CLASS_LINES
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            limit = MAX_FUNCTION_LINES
        else:
            continue
        lines = (node.end_lineno or node.lineno) - node.lineno + 1
        if lines > limit:
            yield node.name, lines, limit


def test_no_class_over_250_lines_and_no_function_over_60() -> None:
    found = {
        f"{path.relative_to(ROOT).as_posix()}::{name}": f"{lines} lines (at most {limit})"
        for path in sources("worker", "opslib", "stagedoor")
        for name, lines, limit in too_long(path)
    }
    new = {name: size for name, size in found.items() if name not in KNOWN_OFFENDERS}
    assert not new, f"split these: {new}"
    fixed = set(KNOWN_OFFENDERS) - set(found)
    assert not fixed, f"no longer too long: remove {sorted(fixed)} from KNOWN_OFFENDERS"


def parameter_counts(path: Path) -> Iterator[tuple[str, int]]:
    """``(name, parameters)`` of each function of ``path``."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            named = [arg.arg for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
            count = len(named) + (args.vararg is not None) + (args.kwarg is not None)
            yield node.name, count - (bool(named) and named[0] in ("self", "cls"))


def test_no_function_takes_more_than_8_parameters() -> None:
    found = {
        f"{path.relative_to(ROOT).as_posix()}:{name}": count
        for path in sources("worker", "opslib", "stagedoor")
        for name, count in parameter_counts(path)
        if count > MAX_PARAMETERS
    }
    assert not found, f"these take more than {MAX_PARAMETERS} parameters; gather them in a record: {found}"


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def runtime_imports(path: Path, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that ``path`` imports when it runs, wherever the import stands (a
    function's too), those under ``if TYPE_CHECKING:`` left out; ``from a import b`` counts ``a.b`` when it
    is a module."""
    tree = ast.parse(path.read_text())
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for inner in ast.walk(node)
    }
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found |= {f"{node.module}.{alias.name}" for alias in node.names} | {node.module}
    return found & modules


def test_no_import_circle() -> None:
    """A package's ``__init__`` is left out: importing any module of a package runs it first, so every module
    would seem to stand in a circle with the face that names it."""
    paths = [path for path in sources("worker", "opslib", "stagedoor") if path.name != "__init__.py"]
    modules = {module_name(path) for path in paths}
    graph = {module_name(path): runtime_imports(path, modules) for path in paths}
    circles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, trail: list[str]) -> None:
        state[module] = 1
        for imported_module in sorted(graph[module]):
            if state.get(imported_module) == 1:
                circles.append([*trail[trail.index(imported_module) :], imported_module])
            elif imported_module not in state:
                visit(imported_module, [*trail, imported_module])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not circles, "these modules import each other: " + "; ".join(" -> ".join(c) for c in circles)


def test_the_core_names_no_application() -> None:
    named = [
        path.relative_to(ROOT).as_posix()
        for path in (*sources("worker"), *(ROOT / "worker").rglob("*.lua"))
        if re.search("stagedoor", path.read_text(), re.IGNORECASE)
    ]
    assert not named, f"the core names the application in {named}: use a neutral example (myapp.kinds, {{jobs}}:)"


def imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_benchmarks_import_no_test_code() -> None:
    for path in sources("benchmarks"):
        tests = sorted(name for name in imported(path) if name == "tests" or name.startswith("tests."))
        assert not tests, f"{path.relative_to(ROOT)} imports {tests}: move what it shares into benchmarks/fixtures.py"


def test_test_modules_are_tests_kinds_or_shared_code() -> None:
    odd = [
        path.relative_to(ROOT).as_posix()
        for path in sources("tests")
        if not re.fullmatch(r"test_\w+|kinds_\w+|helpers(_\w+)?", path.stem) and path.stem not in OTHER_TEST_MODULES
    ]
    assert not odd, f"name these kinds_<what>.py (they declare job kinds) or helpers[_<what>].py: {odd}"
