"""perfmodel.files: a write lands whole or not at all; JSON of numpy and pandas values."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfmodel.files import atomic_write, atomic_write_text, json_safe, write_json


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = atomic_write_text(tmp_path / "new" / "a.json", "old\n")
    assert path.read_text() == "old\n"

    def torn(tmp: Path) -> None:
        tmp.write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(path, torn)
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in path.parent.iterdir()) == ["a.json"]


def _write_many(path: str, marker: str) -> None:
    for _ in range(200):
        atomic_write_text(path, marker * 10_000)


def test_two_processes_writing_one_path_never_leave_a_torn_file(tmp_path: Path) -> None:
    path = tmp_path / "shared.txt"
    ctx = multiprocessing.get_context("spawn")
    writers = [ctx.Process(target=_write_many, args=(str(path), m)) for m in "ab"]
    for w in writers:
        w.start()
    for w in writers:
        w.join(60)
        assert w.exitcode == 0
    assert path.read_text() in ("a" * 10_000, "b" * 10_000)
    assert [p.name for p in tmp_path.iterdir()] == ["shared.txt"]


def test_json_of_numpy_and_pandas_values(tmp_path: Path) -> None:
    value = {"n": np.int64(3), "x": np.float32(0.5), "bad": float("nan"), "na": pd.NA,
             "arr": np.array([1, 2]), "ok": np.bool_(True), "p": tmp_path, 7: (1, 2)}  # fmt: skip
    written = json.loads(write_json(tmp_path / "v.json", value).read_text())
    assert written == {"n": 3, "x": 0.5, "bad": None, "na": None, "arr": [1, 2], "ok": True,
                       "p": str(tmp_path), "7": [1, 2]}  # fmt: skip
    assert (tmp_path / "v.json").read_text().endswith("}\n")
    with pytest.raises(TypeError, match="cannot write object"):
        json_safe(object())
