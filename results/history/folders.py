"""Which runs a folder holds, whatever folder bench wrote: a run, a folder of runs (a --repeat
group, a sweep, an ablation, an A/B session), or a plain folder holding them (a runs folder).

The kinds and the file that makes a folder each are results.folder.folder_kinds'.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from results.folder.folder_kinds import FOLDER_FILES, find_folder_kind
from results.folder.run_folder import RUN_JSON
from results.history.store import Added, History

__all__ = ["DEPTH", "collection_runs", "index_folder"]

DEPTH = 4  # how deep a plain folder is searched for bench's folders


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)
    elif isinstance(value, str) and len(value) < 4096:
        yield value


def collection_runs(folder: Path, definition: str) -> list[Path]:
    """The run folders of a folder of runs: those inside it, and those its ``definition`` file
    names, looked for inside it, as written, then beside it (a sweep's and an ablation's runs
    lie beside it; a moved one is looked for there)."""
    found = {p.parent.resolve() for p in folder.glob(f"**/{RUN_JSON}")}
    document = json.loads((folder / definition).read_text(encoding="utf-8"))
    for text in _strings(document):
        for candidate in (folder / text, Path(text), folder.parent / Path(text).name):
            if _is_run(candidate):
                found.add(candidate.resolve())
                break
    return sorted(found)


def _is_run(candidate: Path) -> bool:
    """Whether ``candidate`` is a run folder. A document's every string is tried, a note of
    300 characters or one with a NUL among them: a name the system refuses (too long, not a
    path) names no run, where asking raised OSError (ENAMETOOLONG) or ValueError."""
    try:
        return (candidate / RUN_JSON).is_file()
    except (OSError, ValueError):
        return False


def index_folder(history: History, folder: Path, depth: int = 0) -> list[Added]:
    """Add ``folder``'s runs to ``history`` (a folder of runs as a collection too). Returns
    what each add did, a run met twice (a sweep's, beside it) twice."""
    kind = find_folder_kind(folder)
    if kind == "run":
        return [history.add(folder)]
    if kind is not None:
        added = [history.add(run) for run in collection_runs(folder, FOLDER_FILES[kind])]
        history.add_collection(kind, folder, added)
        return added
    if depth >= DEPTH:
        return []
    children = sorted(c for c in folder.iterdir() if c.is_dir())
    return [a for child in children for a in index_folder(history, child, depth + 1)]
