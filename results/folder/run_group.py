"""Group folders: the run folders of one `bench run --repeat N`, listed by group.json.

``<runs_dir>/<UTC time>-<scenario>-<engine>-x<N>/`` holds the N run folders and ``group.json``
(``format`` GROUP_FORMAT, ``runs``: the run ids finished so far; bench.experiments.repeat writes
it). Every reader of runs (``bench baseline save``, ``bench gate``) takes a group folder wherever it
takes a run folder, through :func:`expand_run_paths`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from results.folder.run_folder import RUN_JSON, RunFolderError

__all__ = ["GROUP_FORMAT", "GROUP_JSON", "expand_run_paths"]

GROUP_JSON = "group.json"
GROUP_FORMAT = "llm-perf-lab/run-group"


def expand_run_paths(paths: Sequence[Path | str]) -> list[Path]:
    """Run folders from command-line paths: a run folder stays, a group folder gives its runs.

    Raises RunFolderError for a path that is neither, or for a group whose manifest is broken.
    """
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        manifest_path = path / GROUP_JSON
        if (path / RUN_JSON).is_file() or not manifest_path.is_file():
            out.append(path)  # load_run reports a path that is no run folder
            continue
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
            names = manifest["runs"]
            if manifest.get("format") != GROUP_FORMAT or not isinstance(names, list):
                raise ValueError(f"format {manifest.get('format')!r}")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise RunFolderError(f"{manifest_path}: not a run-group manifest: {exc}") from None
        if not names:
            raise RunFolderError(f"{path}: the group has no finished run")
        out += [path / str(name) for name in names]
    return out
