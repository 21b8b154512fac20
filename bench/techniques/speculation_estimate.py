"""The lectures' estimate of speculative decoding's speedup, from measured figures:

    speedup = E[accepted + 1] x T_target / (K x T_draft + T_verify)

E[accepted + 1]: tokens a step that verifies K drafts yields, from the engine's acceptance
counters (engine.core.speculation.SpecStats, as run.json's engine stats before and after the
load). The step costs come from steps.parquet: T_target is the mean time of a pure decode step
of the run without speculation; T_verify that of a pure decode step of the run with it that
verifies drafts (the target scoring 1 + K tokens per sequence: its forward time plus the
baseline's host time per step); K x T_draft the rest of that step (host time beyond the
baseline's: proposing the next drafts). Both runs serve the same requests.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from perfmodel.files import JSONObject
from results.folder.run_folder import RunData


@dataclass(frozen=True)
class SpeculationEstimate:
    """Times in seconds; ``speedup`` is over one T_target step."""

    k: int
    acceptance_rate: float
    # Draft tokens per verifying step: at most K (an n-gram proposer may find fewer).
    draft_tokens_per_step: float
    expected_tokens_per_step: float
    t_target_s: float
    t_verify_s: float
    t_draft_s: float
    speedup: float

    def to_dict(self) -> JSONObject:
        return asdict(self)


def _decode_steps(run: RunData, drafted: bool) -> Any:
    steps = run.steps
    if steps is None or steps.empty:
        return None
    pure = steps[(steps["num_prefill_tokens"] == 0) & (steps["num_decode_seqs"] > 0)]
    verifies = pure["num_decode_tokens"] > pure["num_decode_seqs"]
    chosen = pure[verifies] if drafted else pure
    return chosen if not chosen.empty else None


def _stats_delta(run: RunData, key: str) -> int | None:
    engine = (run.run_json or {}).get("engine") or {}
    start = (engine.get("description") or {}).get("stats") or {}
    end = engine.get("stats_end") or {}
    if key not in end:
        return None
    return int(end[key]) - int(start.get(key, 0))


def speculation_estimate(
    baseline: RunData, speculative: RunData, k: int
) -> SpeculationEstimate | None:
    """The estimate for ``speculative`` (K = ``k`` draft tokens per step) against ``baseline``
    (the same requests without speculation); None when either run lacks the figures (no steps,
    no drafts, no pure decode steps)."""
    plain = _decode_steps(baseline, drafted=False)
    verify = _decode_steps(speculative, drafted=True)
    drafts = _stats_delta(speculative, "spec_num_drafts")
    drafted = _stats_delta(speculative, "spec_num_draft_tokens")
    accepted = _stats_delta(speculative, "spec_num_accepted_tokens")
    if plain is None or verify is None or not drafts or not drafted or accepted is None:
        return None
    t_target = float((plain["end_s"] - plain["start_s"]).mean())
    host_plain = float((plain["end_s"] - plain["start_s"] - plain["forward_s"]).mean())
    t_verify = float(verify["forward_s"].mean()) + host_plain
    host_spec = float((verify["end_s"] - verify["start_s"] - verify["forward_s"]).mean())
    t_draft = max(0.0, host_spec - host_plain) / k
    expected = 1.0 + accepted / drafts
    step = k * t_draft + t_verify
    return SpeculationEstimate(
        k=k,
        acceptance_rate=accepted / drafted,
        draft_tokens_per_step=drafted / drafts,
        expected_tokens_per_step=expected,
        t_target_s=t_target,
        t_verify_s=t_verify,
        t_draft_s=t_draft,
        speedup=expected * t_target / step if step > 0 else 0.0,
    )
