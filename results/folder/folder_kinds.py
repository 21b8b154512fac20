"""The kinds of folder bench writes, each told by the one file that defines it, in the order
they are looked for:

    run       run.json        a run (results.folder.run_folder)
    group     group.json      ``bench run --repeat N`` (results.folder.run_group)
    sweep     sweep.json      ``bench sweep`` (bench.experiments.sweep)
    ablation  ablation.json   ``bench ablate`` (bench.experiments.ablate)
    ab        ab.json         ``bench ab`` (bench.ab.session)

Every folder but a run's is a folder of runs. The commands write these files; ``bench report``
and the run history (results.history.folders) tell the kinds apart by them, from here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from results.folder.run_folder import RUN_JSON, RunFolderError
from results.folder.run_group import GROUP_JSON

__all__ = [
    "ABLATION_JSON",
    "AB_JSON",
    "FOLDER_FILES",
    "SWEEP_JSON",
    "FolderKind",
    "find_folder_kind",
    "folder_kind",
]

FolderKind = Literal["run", "group", "sweep", "ablation", "ab"]

SWEEP_JSON = "sweep.json"
ABLATION_JSON = "ablation.json"
AB_JSON = "ab.json"

FOLDER_FILES: dict[FolderKind, str] = {
    "run": RUN_JSON,
    "group": GROUP_JSON,
    "sweep": SWEEP_JSON,
    "ablation": ABLATION_JSON,
    "ab": AB_JSON,
}


def find_folder_kind(folder: Path) -> FolderKind | None:
    """The kind of ``folder`` from the file it holds, None for a folder of no kind (a plain
    folder, which may hold bench's folders)."""
    return next((k for k, name in FOLDER_FILES.items() if (folder / name).is_file()), None)


def folder_kind(folder: Path) -> FolderKind:
    """The kind of ``folder``; RunFolderError, one line naming the kinds, for one of none."""
    folder = Path(folder)
    kind = find_folder_kind(folder)
    if kind is not None:
        return kind
    what = "does not exist" if not folder.exists() else "holds none of the files"
    kinds = ", ".join(f"{name} ({kind} folder)" for kind, name in FOLDER_FILES.items())
    raise RunFolderError(f"not a folder bench reports: {folder} {what}; one of {kinds}")
