"""The test tree's own rules: it mirrors the packages, and test modules share helpers only
through ``tests/support`` and ``conftest.py``, never by importing one another."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import REPO_ROOT

TESTS = REPO_ROOT / "tests"
# Folders of the test tree that mirror no package: the shared helpers and the test data.
NOT_MIRRORS = {"support", "fixtures"}


def _package_of(path: Path, root: Path) -> str:
    """The package a relative import in ``path`` starts from: its folder's dotted name (an
    ``__init__.py`` is in its own package, a module in its folder's)."""
    return ".".join(path.relative_to(root).parent.parts)


def _imported(tree: ast.Module, package: str) -> list[tuple[int, str]]:
    """(line, dotted name) of every module an import in ``tree`` may load, relative ones
    resolved against ``package``; ``from a import b`` counts ``a`` and ``a.b``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                start = parts[: len(parts) - node.level + 1]
                base = ".".join([*start, base] if base else start)
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def _test_module_in(dotted: str) -> str | None:
    """The test module (or conftest) that importing ``dotted`` loads, if any: the name up to its
    first ``test_*`` or ``conftest`` part."""
    parts = dotted.split(".")
    if parts[0] != "tests":
        return None
    for i, part in enumerate(parts):
        if part.startswith("test_") or part == "conftest":
            return ".".join(parts[: i + 1])
    return None


def cross_test_imports(root: Path) -> list[str]:
    """Every import, in a file under ``root/tests``, of a test module or a conftest.py, as
    "path:line imports name"; ``root`` is the folder that holds the ``tests`` package."""
    problems: list[str] = []
    for path in sorted((root / "tests").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, name in _imported(tree, _package_of(path, root)):
            target = _test_module_in(name)
            problem = f"{path.relative_to(root).as_posix()}:{line} imports {target}"
            if target is not None and problem not in problems:
                problems.append(problem)
    return problems


def unmirrored_folders(root: Path) -> list[str]:
    """Folders under ``root/tests`` (but NOT_MIRRORS) with no package folder at the same path."""
    tests = root / "tests"
    problems = []
    for folder in sorted(p for p in tests.rglob("*") if p.is_dir()):
        relative = folder.relative_to(tests)
        if relative.parts[0] in NOT_MIRRORS or "__pycache__" in relative.parts:
            continue
        if not (root / relative / "__init__.py").is_file():
            problems.append(f"tests/{relative.as_posix()} (no package {relative.as_posix()}/)")
    return problems


def test_no_test_module_imports_another() -> None:
    problems = cross_test_imports(REPO_ROOT)
    assert not problems, "move shared helpers to tests/support/ or a conftest.py fixture:\n" + (
        "\n".join(problems)
    )


def test_every_test_folder_mirrors_a_package() -> None:
    problems = unmirrored_folders(REPO_ROOT)
    assert not problems, "put tests under tests/<package path>/:\n" + "\n".join(problems)


def test_the_checks_catch_what_they_forbid(tmp_path: Path) -> None:
    """Both checks on a small fake project, so that a check that finds nothing is not blind."""
    (tmp_path / "pkg" / "room").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "room" / "__init__.py").write_text("")
    for folder in ("pkg/room", "stray", "support"):
        (tmp_path / "tests" / folder).mkdir(parents=True)
    files = {
        "tests/pkg/room/test_a.py": "from tests.pkg.room.test_b import helper\n",
        "tests/pkg/room/test_b.py": "from . import test_a\nfrom .conftest import x\n",
        "tests/pkg/room/test_c.py": "import tests.pkg.room.test_a\nfrom tests.support import h\n",
        "tests/support/h.py": "from tests.support.paths import REPO_ROOT\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert cross_test_imports(tmp_path) == [
        "tests/pkg/room/test_a.py:1 imports tests.pkg.room.test_b",
        "tests/pkg/room/test_b.py:1 imports tests.pkg.room.test_a",
        "tests/pkg/room/test_b.py:2 imports tests.pkg.room.conftest",
        "tests/pkg/room/test_c.py:1 imports tests.pkg.room.test_a",
    ]
    assert unmirrored_folders(tmp_path) == ["tests/stray (no package stray/)"]
