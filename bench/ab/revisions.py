"""A side's code by commit (`bench ab --a-rev/--b-rev`): its own checkout and virtualenv, cached.

Layout under the cache folder (perfmodel.cache.revisions_dir), one folder per commit::

    revisions/<sha>/src/     a detached `git worktree` of this repository at <sha>
    revisions/<sha>/venv/    a virtualenv holding <sha>'s project, installed editable from src/
    revisions/<sha>/ready    written last: the folder is complete and is reused while the
                             environment it borrows from is the one running now

The virtualenv reuses the current environment's packages instead of installing them again (torch
alone is gigabytes): a ``.pth`` file in its site-packages names this interpreter's site-packages
as a plain path entry, and the project goes in with ``pip install --no-deps
--no-build-isolation -e src``. A plain path entry does not run that folder's own ``.pth`` files,
so this checkout's editable install is not seen there and ``import bench`` finds <sha>'s.
The cache outlives the environment it borrowed from (a clean clone's .venv is deleted, another
checkout runs the same commit): a folder whose ``.pth`` names another environment than the
running one gets its virtualenv made again (about a second) before it is used, else its engine
would start without torch.
Engines of the side run as ``venv/bin/python -I -m bench serve``: ``-I`` keeps PYTHONPATH and
the current folder out of sys.path, which would otherwise shadow <sha>'s code with this one's.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from perfmodel.cache import revisions_dir

__all__ = ["Revision", "RevisionError", "install_revision", "project_root", "resolve_commit"]

# The project's checkout: the folder that holds the bench package.
_PROJECT_ROOT = Path(__file__).resolve().parents[2]


class RevisionError(ValueError):
    """A revision that cannot be resolved or installed; the message names it and the fix."""


@dataclass(frozen=True)
class Revision:
    """One installed commit: what the user asked for, the full sha, and where it lives."""

    rev: str
    commit: str
    folder: Path

    @property
    def python(self) -> Path:
        return self.folder / "venv" / "bin" / "python"

    @property
    def source(self) -> Path:
        return self.folder / "src"


def project_root() -> Path:
    """The checkout this bench runs from (its git repository is where revisions resolve)."""
    return _PROJECT_ROOT


def _git(*args: str, cwd: Path) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        raise RevisionError(lines[-1] if lines else f"git {' '.join(args)} failed")
    return proc.stdout.strip()


def resolve_commit(rev: str, option: str, repo: Path | None = None) -> str:
    """The full sha of ``rev`` in ``repo`` (default: this checkout); raises RevisionError."""
    repo = repo or project_root()
    try:
        return _git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", cwd=repo)
    except RevisionError:
        raise RevisionError(
            f"{option} {rev!r}: no such commit in {repo} (a shallow clone lacks older commits:"
            " fetch with --unshallow, or give a commit it has)"
        ) from None
    except FileNotFoundError:
        raise RevisionError(f"{option} {rev!r}: git is not installed") from None


def _run_step(command: list[str], what: str, option: str, rev: str) -> None:
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        tail = lines[-1] if lines else f"exit status {proc.returncode}"
        raise RevisionError(f"{option} {rev!r}: {what} failed: {tail}")


# The .pth in a revision's site-packages that names the running environment's site-packages.
_PARENT_PTH = "_llm_perf_lab_parent_env.pth"


def _site_packages(venv: Path) -> Path:
    return Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))


def _borrows_this_environment(revision: Revision) -> bool:
    """Whether ``revision``'s virtualenv borrows its packages from the running environment."""
    pth = _site_packages(revision.folder / "venv") / _PARENT_PTH
    try:
        named = pth.read_text(encoding="utf-8").strip()
    except OSError:
        return False
    return named == sysconfig.get_path("purelib") and revision.python.exists()


def _build(folder: Path, commit: str, option: str, rev: str, repo: Path) -> None:
    source, venv = folder / "src", folder / "venv"
    if not (source / ".git").exists():
        try:
            _git("worktree", "add", "--detach", "--force", str(source), commit, cwd=repo)
        except RevisionError as exc:
            raise RevisionError(f"{option} {rev!r}: git worktree add failed: {exc}") from None
    # The base interpreter, not this virtualenv's: a venv made from a venv's python would
    # point at the base anyway, and the .pth below brings this environment's packages.
    base_python = getattr(sys, "_base_executable", sys.executable)
    _run_step(
        [base_python, "-m", "venv", "--clear", "--without-pip", str(venv)], "venv", option, rev
    )
    here = sysconfig.get_path("purelib")
    (_site_packages(venv) / _PARENT_PTH).write_text(here + "\n", encoding="utf-8")
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install"]
    pip += ["-q", "--no-deps", "--no-build-isolation", "-e", str(source)]
    _run_step(pip, "pip install --no-deps -e", option, rev)


def _check_imports(revision: Revision, option: str) -> None:
    """RevisionError unless the virtualenv imports bench from the revision's source and torch
    from the environment it borrows."""
    code = "import bench, torch; print(bench.__file__)"
    check = [str(revision.python), "-I", "-c", code]
    proc = subprocess.run(check, capture_output=True, text=True, check=False)
    found = proc.stdout.strip()
    if proc.returncode != 0 or not found.startswith(str(revision.source)):
        lines = proc.stderr.strip().splitlines()
        why = lines[-1] if proc.returncode != 0 and lines else f"bench from {found or 'nowhere'}"
        raise RevisionError(
            f"{option} {revision.rev!r}: its virtualenv imports {why}, not bench from"
            f" {revision.source}; remove {revision.folder} and try again"
        )


def install_revision(rev: str, option: str, repo: Path | None = None) -> Revision:
    """``rev``'s checkout and virtualenv, built on first use and reused after (module doc).

    Raises RevisionError naming ``option`` when the commit is unknown or cannot be installed.
    Concurrent callers for one commit wait for each other (a lock file in its folder).
    """
    repo = repo or project_root()
    commit = resolve_commit(rev, option, repo)
    folder = revisions_dir() / commit
    folder.mkdir(parents=True, exist_ok=True)
    revision = Revision(rev, commit, folder)
    with (folder / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not ((folder / "ready").is_file() and _borrows_this_environment(revision)):
            (folder / "ready").unlink(missing_ok=True)
            _build(folder, commit, option, rev, repo)
            _check_imports(revision, option)
            (folder / "ready").write_text(commit + "\n", encoding="utf-8")
    os.utime(folder)  # the last use, for whoever prunes the cache
    return revision
