"""Every module the product imports is declared: a fresh `pip install -e .` (plus the extra a
feature names) must run every shipped scenario. 2301656's images workload imported PIL, which
no dependency declared, and `bench run --scenario images` died on the README's install."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions

from tests.support.paths import REPO_ROOT

_PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
PACKAGES: tuple[str, ...] = tuple(_PYPROJECT["tool"]["importlinter"]["root_packages"])


def _name(requirement: str) -> str:
    """A requirement's distribution name, normalized (PEP 503)."""
    bare = re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", bare).lower()


def _imported_top_levels() -> dict[str, str]:
    """Every top-level module the product's packages import -> one file importing it."""
    found: dict[str, str] = {}
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    found.setdefault(name.split(".")[0], str(path.relative_to(REPO_ROOT)))
    return found


def test_every_imported_distribution_is_declared() -> None:
    project = _PYPROJECT["project"]
    declared = {_name(r) for r in project["dependencies"]}
    for extra in project["optional-dependencies"].values():
        declared |= {_name(r) for r in extra}
    providers = packages_distributions()
    missing = []
    for module, where in sorted(_imported_top_levels().items()):
        if module in PACKAGES or module in sys.stdlib_module_names or module == "__future__":
            continue
        dists = {_name(d) for d in providers.get(module, [])}
        if not dists:
            continue  # not installed here: an optional feature's import, guarded where used
        if not dists & declared:
            missing.append(f"{module} ({', '.join(sorted(dists))}), imported by {where}")
    assert not missing, "declare in pyproject.toml: " + "; ".join(missing)
