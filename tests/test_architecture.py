"""docs/ARCHITECTURE.md against the code, so the design document cannot drift from it; and the
house's sizes: rooms of at most 16 modules, functions of at most 120 lines (five at most over 80,
none of the server's over 60).

Checked: the import contracts as the document lists them against pyproject.toml's; the tables of
what each package and each room imports against the import graph; every package folder of the
product named in a table of the tree or of rooms, and every folder those tables name present;
the list of tests/support modules against the folder; the JSON documents' versions against the
schemas. Each failure says what to write in the document."""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

import grimp
import pytest

from results.schema.run_json import RUN_JSON_VERSION
from results.schema.summary_json import SUMMARY_JSON_VERSION

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "ARCHITECTURE.md"
PACKAGES = (
    "perfmodel", "results", "engine", "loadgen", "probes", "engine_adapters", "dashboards", "bench",
)  # fmt: skip


@pytest.fixture(scope="module")
def doc() -> str:
    return DOC.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(*PACKAGES)


def tables(text: str, header: str) -> Iterator[tuple[str, str]]:
    """(first cell, second cell) of every row of every table whose header row is ``header``."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip() != header:
            continue
        for row in lines[i + 2 :]:
            if not row.startswith("|"):
                break
            cells = [c.strip() for c in row.strip().strip("|").split("|")]
            yield cells[0], cells[1] if len(cells) > 1 else ""


def ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def render_contracts(pyproject: dict) -> str:
    """The import contracts as the document lists them: each name, then its layers or rule."""
    out = []
    for c in pyproject["tool"]["importlinter"]["contracts"]:
        if c["type"] == "layers":
            inside = f"   (inside {c['containers'][0]})" if c.get("containers") else ""
            out.append(f'"{c["name"]}"{inside}')
            out.extend(f"    {layer}" for layer in c["layers"])
        else:
            out.append(f'"{c["name"]}"')
            sources = ", ".join(c["source_modules"])
            out.append(f"    {sources} may not import {', '.join(c['forbidden_modules'])}")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def test_the_documents_contracts_are_pyprojects(doc: str) -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    expected = render_contracts(pyproject)
    match = re.search(r"The (\w+) contracts, by their names:\n\n```\n(.*?)```", doc, re.S)
    assert match is not None, "docs/ARCHITECTURE.md lost its block of import contracts"
    count = len(pyproject["tool"]["importlinter"]["contracts"])
    assert match.group(2) == expected, f"write the contracts block as:\n{expected}"
    words = {12: "twelve", 13: "thirteen", 14: "fourteen", 15: "fifteen", 16: "sixteen"}
    assert match.group(1) == words.get(count, str(count)), f"say there are {count} contracts"


def imported_by(graph: grimp.ImportGraph, importer: str, scope: tuple[str, ...]) -> set[str]:
    """The modules under ``scope`` that ``importer`` (with its descendants) imports, outside
    itself."""
    mods = graph.find_descendants(importer) | {importer}
    out = set()
    for m in mods:
        for b in graph.find_modules_directly_imported_by(m):
            inside = b == importer or b.startswith(importer + ".")
            if not inside and any(b == s or b.startswith(s + ".") for s in scope):
                out.add(b)
    return out


def covers(name: str, module: str) -> bool:
    return module == name or module.startswith(name + ".")


def check_import_table(
    graph: grimp.ImportGraph, rows: list[tuple[str, str]], scope: tuple[str, ...]
) -> list[str]:
    """What the rows ``(`importer`, its imports)`` say wrong of the graph, within ``scope``."""
    wrong = []
    for first, second in rows:
        (importer,) = ticked(first)
        said = [n for n in ticked(second) if n.split(".")[0] in PACKAGES]
        actual = imported_by(graph, importer, scope)
        unsaid = sorted({m for m in actual if not any(covers(n, m) for n in said)})
        untrue = [n for n in said if not any(covers(n, m) for m in actual)]
        if unsaid:
            wrong.append(f"{importer} also imports {', '.join(unsaid)}")
        if untrue:
            wrong.append(f"{importer} does not import {', '.join(untrue)}")
    return wrong


def test_what_each_package_imports_is_the_import_graph(doc: str, graph: grimp.ImportGraph) -> None:
    rows = list(tables(doc, "| package | imports |"))
    assert sorted(ticked(r[0])[0] for r in rows) == sorted(PACKAGES)
    assert check_import_table(graph, rows, PACKAGES) == []


def test_what_each_room_imports_is_the_import_graph(doc: str, graph: grimp.ImportGraph) -> None:
    rows = list(tables(doc, "| room | imports |"))
    for container in ("engine", "bench"):
        rooms = sorted(graph.find_children(container))
        inner = [r for r in rows if ticked(r[0])[0].startswith(container + ".")]
        assert sorted(ticked(r[0])[0] for r in inner) == rooms, f"list {container}'s rooms: {rooms}"
        assert check_import_table(graph, inner, (container,)) == []


def package_folders() -> list[str]:
    out = []
    for top in PACKAGES:
        for init in sorted((ROOT / top).rglob("__init__.py")):
            out.append(init.parent.relative_to(ROOT).as_posix() + "/")
    return out


def test_every_room_is_in_the_document_and_every_listed_room_exists(doc: str) -> None:
    named = {t for header in ("| folder | subject |", "| room | holds |")
             for first, _ in tables(doc, header) for t in ticked(first)}  # fmt: skip
    missing = [f for f in package_folders() if f not in named]
    assert missing == [], f"give each folder a row in a table of rooms: {missing}"
    gone = sorted(f for f in named if f.endswith("/") and not (ROOT / f).is_dir())
    assert gone == [], f"these folders are named but do not exist: {gone}"


def test_the_support_modules_listed_are_the_folders(doc: str) -> None:
    listed = sorted(ticked(first)[0] for first, _ in tables(doc, "| support module | holds |"))
    present = sorted(p.stem for p in (ROOT / "tests" / "support").glob("*.py")
                     if p.stem != "__init__")  # fmt: skip
    assert listed == present, "give each tests/support module a row of the support table"


def test_the_documents_versions_are_the_schemas(doc: str) -> None:
    assert f"run.json's format version ({RUN_JSON_VERSION};" in doc
    assert f"the summary's format version ({SUMMARY_JSON_VERSION})" in doc


MAX_MODULES_PER_ROOM = 16
MAX_FUNCTION_LINES = 120
LONG_FUNCTION_LINES = 80
MAX_LONG_FUNCTIONS = 5
MAX_SERVER_FUNCTION_LINES = 60


def function_lengths() -> list[tuple[int, str]]:
    """(lines, "path:name") of every function of the product's packages."""
    out = []
    for top in PACKAGES:
        for path in sorted((ROOT / top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines = (node.end_lineno or node.lineno) - node.lineno + 1
                    out.append((lines, f"{path.relative_to(ROOT)}:{node.name}"))
    return out


def test_no_room_holds_more_than_16_modules() -> None:
    crowded = []
    for folder in package_folders():
        # __init__.py counts: it is a module of the room as much as any other.
        modules = list((ROOT / folder).glob("*.py"))
        if len(modules) > MAX_MODULES_PER_ROOM:
            crowded.append(f"{folder}: {len(modules)}")
    assert crowded == [], "split these rooms by subject"


def test_functions_stay_short() -> None:
    lengths = function_lengths()
    assert [w for n, w in lengths if n > MAX_FUNCTION_LINES] == []
    long = sorted((n, w) for n, w in lengths if n > LONG_FUNCTION_LINES)
    assert len(long) <= MAX_LONG_FUNCTIONS, long
    server = [
        w for n, w in lengths if n > MAX_SERVER_FUNCTION_LINES and w.startswith("engine/serving/")
    ]
    assert server == []
