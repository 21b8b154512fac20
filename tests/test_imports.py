"""Imports inside functions are rare and say why: none of them may hide an import cycle.

import-linter (`lint-imports`, pyproject.toml) checks the layers over every import, function-local
ones included. This test keeps the local ones few and explained: outside bench.cli (whose commands
import what they run, so that `bench --help` starts without torch), a project module imported
inside a function carries an "Imported here" comment just above it saying why.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

from tests.support.paths import REPO_ROOT

# The project's packages, as import-linter's contracts name them.
_PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
PACKAGES: tuple[str, ...] = tuple(_PYPROJECT["tool"]["importlinter"]["root_packages"])
LAZY_PACKAGES = ("bench/cli",)
REASON = "# Imported here"


def _project_module(node: ast.Import | ast.ImportFrom) -> str | None:
    names = (
        [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
    )
    for name in names:
        if name.split(".")[0] in PACKAGES and not getattr(node, "level", 0):
            return name
    return None


def local_imports_without_reason(path: Path, root: Path = REPO_ROOT) -> list[str]:
    """``file:line module`` for each function-local project import with no reason above it."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found = []
    for func in ast.walk(ast.parse("\n".join(lines))):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(func):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            module = _project_module(node)
            if module is None:
                continue
            above = lines[max(0, node.lineno - 4) : node.lineno - 1]
            if not any(line.strip().startswith(REASON) for line in above):
                found.append(f"{path.relative_to(root)}:{node.lineno} {module}")
    return found


def test_function_local_imports_say_why() -> None:
    offenders = []
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            if not path.relative_to(REPO_ROOT).as_posix().startswith(LAZY_PACKAGES):
                offenders += local_imports_without_reason(path)
    assert not offenders, "function-local imports without an 'Imported here' reason:\n" + "\n".join(
        offenders
    )


def test_the_check_finds_an_unexplained_local_import(tmp_path: Path) -> None:
    bad = tmp_path / "module.py"
    bad.write_text(
        "def f():\n    from engine.config import EngineConfig\n\n    return EngineConfig\n"
        "\n\ndef g():\n    # Imported here: a documented reason.\n"
        "    from engine.config import EngineConfig\n\n    return EngineConfig\n"
    )
    assert local_imports_without_reason(bad, tmp_path) == ["module.py:2 engine.config"]
