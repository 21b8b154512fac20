"""A rev side's cached checkout and virtualenv: built once, reused, and made again when the
environment it borrows its packages from is no longer the running one (a deleted clean clone's
.venv left in the cache gave an engine without torch)."""

from __future__ import annotations

import subprocess
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.ab.revisions import install_revision
from perfmodel.cache import CACHE_ENV
from tests.support.paths import REPO_ROOT


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    yield tmp_path / "cache"
    # The worktree's metadata lives in this repository: drop it with the folder.
    for src in (tmp_path / "cache" / "revisions").glob("*/src"):
        subprocess.run(
            ["git", "worktree", "remove", "--force", str(src)], cwd=REPO_ROOT, check=False
        )
    subprocess.run(["git", "worktree", "prune"], cwd=REPO_ROOT, check=False)


def _parent_pth(folder: Path) -> Path:
    venv = folder / "venv"
    site = sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)})
    return Path(site) / "_llm_perf_lab_parent_env.pth"


def _imports_torch(python: Path) -> bool:
    proc = subprocess.run([str(python), "-I", "-c", "import torch"], capture_output=True)
    return proc.returncode == 0


def test_a_revision_is_reused_then_remade_for_another_environment(cache: Path) -> None:
    first = install_revision("HEAD", "--a-rev")
    assert first.folder.parent == cache / "revisions"
    assert (first.folder / "ready").is_file() and _imports_torch(first.python)
    pth = _parent_pth(first.folder)
    assert pth.read_text().strip() == sysconfig.get_path("purelib")

    # Reused as it is: the virtualenv is not made again (its .pth keeps its inode).
    inode = pth.stat().st_ino
    assert install_revision("HEAD", "--b-rev").folder == first.folder
    assert pth.stat().st_ino == inode

    # The environment it borrowed from is gone: without the rebuild its python lacks torch.
    pth.write_text(str(cache / "deleted-clone" / ".venv" / "site-packages") + "\n")
    assert not _imports_torch(first.python)
    again = install_revision("HEAD", "--a-rev")
    assert pth.read_text().strip() == sysconfig.get_path("purelib")
    assert (again.folder / "ready").is_file() and _imports_torch(again.python)
