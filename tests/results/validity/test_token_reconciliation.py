"""Token reconciliation (results.validity.token_reconciliation): which disagreements mark a run."""

from __future__ import annotations

import pandas as pd
import pytest

from results.validity.token_reconciliation import (
    MAX_TOKEN_MISMATCH,
    reconciliation_lines,
    token_reconciliation,
)


def requests(n: int, prompt: int, usage_prompt: int, out: int, client_out: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "request_id": [f"r{i}" for i in range(n)],
            "status": ["ok"] * n,
            "http_status": [200] * n,
            "prompt_tokens": [usage_prompt] * n,
            "output_tokens": [out] * n,
            "client_prompt_tokens": [prompt] * n,
            "usage_prompt_tokens": [usage_prompt] * n,
            "usage_output_tokens": [out] * n,
            "client_output_tokens": [client_out] * n,
        }
    )


def counters(prompt_total: float, generation_total: float) -> pd.DataFrame:
    rows = []
    for name, total in (("prompt_tokens_total", prompt_total),
                        ("generation_tokens_total", generation_total)):  # fmt: skip
        rows += [
            {"t_s": 0.0, "source": "engine", "name": name, "labels": "", "value": 1000.0},
            {"t_s": 9.0, "source": "engine", "name": name, "labels": "", "value": 1000 + total},
        ]
    return pd.DataFrame(rows)


def by_what(section: dict) -> dict[str, dict]:
    return {c["what"]: c for c in section["comparisons"]}


def test_a_server_that_counts_bos_is_not_a_mismatch() -> None:
    # 16-token prompts: the BOS token is 6% of each, yet no request is off.
    section = token_reconciliation(requests(40, 16, 17, 32, 32), counters(680, 1280), "completions")
    assert section["available"] and not section["mismatched"]
    prompt = by_what(section)["prompt tokens"]
    assert prompt["ratio"] == pytest.approx(16 / 17) and prompt["requests_off"] == 0
    engine = by_what(section)["output tokens (engine)"]
    assert engine["ratio"] == 1.0 and not engine["exceeds"]


def test_prompts_built_with_another_tokenizer_mark_the_run() -> None:
    section = token_reconciliation(requests(40, 100, 175, 32, 32), None, "completions")
    assert section["mismatched"]
    prompt = by_what(section)["prompt tokens"]
    assert prompt["exceeds"] and prompt["requests_off"] == 40 and prompt["share_off"] == 1.0
    assert len(prompt["worst"]) == 5 and prompt["worst"][0] == {
        "request_id": "r0", "tokenizer": 100, "usage": 175,
    }  # fmt: skip
    assert "the prompts were not the lengths asked for" in section["messages"][0]


def test_a_few_requests_off_stay_within_the_threshold() -> None:
    frame = requests(100, 100, 101, 32, 32)
    n_off = int(100 * MAX_TOKEN_MISMATCH)  # exactly at the threshold: not above it
    frame.loc[: n_off - 1, "usage_prompt_tokens"] = 150
    section = token_reconciliation(frame, None, "completions")
    assert by_what(section)["prompt tokens"]["requests_off"] == n_off
    assert not section["mismatched"]
    frame.loc[n_off, "usage_prompt_tokens"] = 150
    assert token_reconciliation(frame, None, "completions")["mismatched"]


def test_chat_prompts_are_compared_but_not_judged() -> None:
    section = token_reconciliation(requests(10, 100, 130, 32, 32), None, "chat")
    prompt = by_what(section)["prompt tokens"]
    assert prompt["requests_off"] == 10 and not prompt["judged"] and not prompt["exceeds"]
    assert prompt["mean_difference"] == -30.0 and "chat template" in prompt["note"]
    assert not section["mismatched"]


def test_a_re_tokenized_output_is_reported_not_judged() -> None:
    # The inference-perf case: re-encoding streamed text inflates output tokens 1.75x.
    section = token_reconciliation(requests(20, 64, 65, 100, 175), None, "completions")
    out = by_what(section)["output tokens"]
    assert out["ratio"] == pytest.approx(1.75) and out["requests_off"] == 20
    assert not out["judged"] and not section["mismatched"]
    assert any("output tokens: tokenizer 3,500 vs usage 2,000 (1.750x)" in line
               for line in reconciliation_lines(section))  # fmt: skip


def test_usage_that_disagrees_with_the_engine_counter_marks_the_run() -> None:
    frame = requests(10, 64, 65, 100, 100)
    section = token_reconciliation(frame, counters(650, 1200), "completions")
    engine = by_what(section)["output tokens (engine)"]
    assert engine["other_total"] == 1200 and engine["server_total"] == 1000
    assert engine["exceeds"] and section["mismatched"]
    assert "not what its engine counted" in section["messages"][0]


def test_failed_requests_count_on_the_engine_side() -> None:
    frame = requests(10, 64, 65, 100, 100)
    # A request cut after 40 tokens, without usage: the engine still generated them.
    frame.loc[9, ["status", "output_tokens", "usage_output_tokens"]] = ["cancelled", 40, None]
    section = token_reconciliation(frame, counters(650, 940), "completions")
    assert by_what(section)["output tokens (engine)"]["server_total"] == 940
    assert not section["mismatched"]


def test_without_usage_there_is_nothing_to_reconcile() -> None:
    frame = requests(5, 64, 65, 100, 100)
    frame["usage_output_tokens"] = None
    section = token_reconciliation(frame, None, "completions")
    assert not section["available"] and "no usage" in section["reason"]
    assert reconciliation_lines(section)[0].startswith("No token reconciliation")


def test_a_simulated_run_says_its_counts_are_the_engines_own() -> None:
    """`bench simulate` printed its output tokens as the usage's and then "the server sent no
    usage": a simulated run has no server between, and says so."""
    section = token_reconciliation(requests(10, 100, 130, 32, 32), None, "chat", simulated=True)
    assert not section["available"]
    assert section["reason"].startswith("a simulated run counts its tokens from the engine's")
