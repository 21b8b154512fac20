"""Which history a command writes to, and a finished run adding itself to it.

The history is, in this order: ``--history PATH``; the environment variable
:data:`ENV_VAR` (a shared history, e.g. on a volume CI machines share;
``off`` for none); ``history.duckdb`` in the runs folder. ``--no-history`` writes none. A
command settles the choice once (:func:`choose_history`), into the variable, so that every run
it makes, however deep (a --repeat group's, a sweep's, an A/B's), adds itself to the same one
(:func:`record_run`, called by the run writer once summary.json is written).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from results.history.store import Added

__all__ = ["DEFAULT_NAME", "ENV_VAR", "OFF", "choose_history", "chosen_history", "record_run"]

# The environment variable that names a shared history (a path, or "off" for none).
ENV_VAR = "LLM_PERF_LAB_HISTORY"
# The history's file in a runs folder when neither --history nor the variable names one.
DEFAULT_NAME = "history.duckdb"
OFF = "off"


def choose_history(option: Path | None, no_history: bool, runs_dir: Path) -> Path | None:
    """Settle the history of this command (module docstring) and return it (None: none)."""
    if no_history or (option is None and _variable().lower() == OFF):
        os.environ[ENV_VAR] = OFF
        return None
    chosen = option or chosen_history(runs_dir)
    assert chosen is not None
    os.environ[ENV_VAR] = str(Path(chosen).resolve())
    return Path(chosen)


def _variable() -> str:
    return os.environ.get(ENV_VAR, "").strip()


def chosen_history(runs_dir: Path | None) -> Path | None:
    """The history the variable names; unset: ``runs_dir``'s (None without one); ``off``: None."""
    value = _variable()
    if value.lower() == OFF:
        return None
    if value:
        return Path(value)
    return None if runs_dir is None else Path(runs_dir) / DEFAULT_NAME


def record_run(folder: Path) -> tuple[Added | None, str | None]:
    """Add the finished run ``folder`` to the chosen history, when a command chose one.

    Returns (what was added, None), (None, None) when no history is chosen, or (None, a
    warning) when it could not be added: the run is written either way, and
    `bench history add FOLDER` adds it later.
    """
    target = chosen_history(None)
    if target is None:
        return None, None
    # Imported here: DuckDB loads only where a run is added, not with every command's options.
    from results.history.store import History

    try:
        return History(target).add(folder), None
    except Exception as exc:  # the history is an index: it never fails the run it indexes
        return None, (
            f"not added to the history {target} ({type(exc).__name__}: {exc}); "
            f"add it with: bench history add {folder}"
        )
