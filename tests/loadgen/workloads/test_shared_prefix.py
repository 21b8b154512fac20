"""Shared system prompts: requests start with one of k prefixes at a share ratio."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.scenario.scenario import ScenarioError, load_scenario
from loadgen.workloads.prompts import synthetic_requests
from loadgen.workloads.spec import LengthDist, SharedPrefix, WorkloadError
from tests.support.tokenizers import make_tokenizer


def test_prefixes_are_shared_and_counts_exact() -> None:
    tok = make_tokenizer()
    specs = synthetic_requests(
        tok, 60, LengthDist("fixed", value=20), LengthDist("fixed", value=4), seed=5,
        shared_prefix=SharedPrefix(tokens=64, num_prefixes=3, share_ratio=0.5),
    )  # fmt: skip
    heads: dict[tuple[int, ...], int] = {}
    shared = 0
    for spec in specs:
        ids = tok.encode(spec.prompt, add_special_tokens=False)
        assert len(ids) == spec.prompt_tokens  # never mislabelled
        if spec.prompt_tokens >= 83:  # 64 + 20, give or take a boundary merge
            shared += 1
            head = tuple(ids[:60])
            heads[head] = heads.get(head, 0) + 1
        else:
            assert spec.prompt_tokens == 20
    assert len(heads) == 3  # three distinct system prompts
    assert 18 <= shared <= 42  # share ratio 0.5 of 60


def test_shared_prefix_parameters_are_checked() -> None:
    with pytest.raises(WorkloadError, match="share_ratio"):
        SharedPrefix(tokens=10, share_ratio=1.5)


def test_scenario_reads_the_shared_prefix_table(tmp_path: Path) -> None:
    base = """
name = "sp"
users = 2
num_requests = 4
[input_len]
kind = "fixed"
value = 8
[output_len]
kind = "fixed"
value = 2
[shared_prefix]
"""
    path = tmp_path / "sp.toml"
    path.write_text(base + "tokens = 2000\nnum_prefixes = 2\nshare_ratio = 0.6\n")
    s = load_scenario(path)
    assert s.shared_prefix is not None and s.shared_prefix.tokens == 2000
    assert s.to_dict()["shared_prefix"] == {"tokens": 2000, "num_prefixes": 2, "share_ratio": 0.6}
    path.write_text(base + "tokens = 20\nshare_ratio = 2.0\n")
    with pytest.raises(ScenarioError, match="share_ratio"):
        load_scenario(path)
    path.write_text(base + "token = 20\n")
    with pytest.raises(ScenarioError, match="token"):
        load_scenario(path)
