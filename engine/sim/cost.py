"""The predicted time of one engine step on a (simulated) device, from the roofline model.

time = max(FLOPs / achieved FLOP/s, bytes / achieved bytes/s)      the step's kernels
     + 2 all-reduces per layer (and a logits gather) over the link   tensor parallelism
     + step overhead + sequence overhead x sequences                 scheduling, launches, sampling
     + k draft-model decode steps (speculative decoding with a draft model)

FLOPs and bytes per GPU come from perfmodel.roofline.CostModel; achieved rates are the peaks times
efficiencies (perfmodel.efficiency for a GPU, the calibration of this machine for ``cpu``); the
all-reduce time is NCCL's cost model (perfmodel.efficiency.allreduce_time_s). Collectives are not
overlapped with compute (tensor parallelism waits for them), which is how engines run decode.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from perfmodel import calibration as calibrate
from perfmodel.efficiency import (
    Interconnect,
    allreduce_source,
    allreduce_time_s,
    efficiency_for,
    interconnect_for,
)
from perfmodel.hardware import compute_dtype, get_gpu, spec_from_calibration
from perfmodel.model_config import ModelConfig
from perfmodel.models import dtype_bytes
from perfmodel.roofline import Batch, CostModel, Precision

CPU = "cpu"


@dataclass(frozen=True)
class DeviceRoofs:
    """One simulated device: datasheet (or measured) peaks, the achieved rates used, sources.

    Rates per GPU: FLOP/s in ``compute_dtype``, memory bytes/s. ``memory_bytes`` is the device's
    memory (0 for a CPU: its KV budget is the engine's setting).
    """

    key: str
    name: str
    compute_dtype: str
    peak_flops_per_s: float
    peak_bytes_per_s: float
    flops_per_s: float
    bytes_per_s: float
    memory_bytes: float
    interconnect: Interconnect | None
    sources: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["interconnect"] = self.interconnect.to_dict() if self.interconnect else None
        return out


def device_roofs(
    gpu: str,
    dtype: str,
    compute_efficiency: float | None = None,
    memory_efficiency: float | None = None,
) -> DeviceRoofs:
    """Roofs of ``gpu`` (a perfmodel.hardware key or alias, or ``cpu`` for this machine as `bench
    calibrate` measured it) computing in ``dtype``.

    Efficiencies given here (a calibration of this machine) override the published ones.
    Raises ValueError when the part is unknown or has no peak for ``dtype``, or ``cpu`` was
    never calibrated.
    """
    key = compute_dtype(dtype)
    if gpu == CPU:
        saved = calibrate.load()
        if saved is None:
            raise ValueError(
                "gpu='cpu' simulates this machine from its calibration, and there is none: run "
                "`bench calibrate` first"
            )
        spec = spec_from_calibration(saved, "cpu")
        peak_f, peak_b = spec.peak_for(key), spec.memory_bytes_per_s
        return DeviceRoofs(
            CPU, spec.name, key, peak_f, peak_b,
            peak_f * (compute_efficiency or 1.0), peak_b * (memory_efficiency or 1.0), 0.0, None,
            {"peaks": spec.source, "efficiency": "sim calibration of this machine"
             if compute_efficiency else "none: the calibrated peaks are used"},
        )  # fmt: skip
    spec = get_gpu(gpu)
    published = efficiency_for(spec.key)
    eff_f = compute_efficiency or published.compute
    eff_b = memory_efficiency or published.memory
    peak_f = spec.peak_for(key)
    return DeviceRoofs(
        spec.key, spec.name, key, peak_f, spec.memory_bytes_per_s,
        peak_f * (eff_f or 1.0), spec.memory_bytes_per_s * (eff_b or 1.0), spec.memory_bytes,
        interconnect_for(spec.key),
        {"peaks": spec.source, "compute_efficiency": published.compute_source,
         "memory_efficiency": published.memory_source, "allreduce": allreduce_source()},
    )  # fmt: skip


@dataclass(frozen=True)
class StepTime:
    """The parts of one step's predicted time, seconds."""

    compute_s: float
    memory_s: float
    comm_s: float
    overhead_s: float
    draft_s: float

    @property
    def kernels_s(self) -> float:
        """The roofline part: the slower of compute and memory."""
        return max(self.compute_s, self.memory_s)

    @property
    def total_s(self) -> float:
        return self.kernels_s + self.comm_s + self.overhead_s + self.draft_s


class StepTimeModel:
    """Predicts step times of ``config`` at ``precision`` on ``tp`` devices with ``roofs``.

    ``step_overhead_s`` is paid once per step, ``seq_overhead_s`` once per scheduled sequence
    (seconds). ``draft`` is the draft model's own time model (speculative decoding with a draft
    model), whose decode steps are charged k times per verifying step.
    """

    def __init__(
        self,
        config: ModelConfig,
        precision: Precision,
        tp: int,
        roofs: DeviceRoofs,
        step_overhead_s: float = 0.0,
        seq_overhead_s: float = 0.0,
        draft: StepTimeModel | None = None,
    ) -> None:
        if tp > 1 and roofs.interconnect is None:
            raise ValueError(
                f"tp={tp}: {roofs.name} has no GPU-to-GPU link in perfmodel.efficiency; use tp=1"
            )
        if step_overhead_s < 0 or seq_overhead_s < 0:
            raise ValueError("step and sequence overheads must be >= 0 seconds")
        self.config = config
        self.cost = CostModel(config, precision, tp)
        self.tp = tp
        self.roofs = roofs
        self.step_overhead_s = step_overhead_s
        self.seq_overhead_s = seq_overhead_s
        self.draft = draft
        self._act_bytes = dtype_bytes(self.cost.precision.activation_dtype)

    def comm_s(self, num_tokens: float, num_logits: float) -> float:
        """All-reduce time of a step: two per layer (after attention and after the MLP) of the
        tokens' hidden states, plus the gather of the vocabulary-sharded logits (an all-gather
        moves half of what an all-reduce of the whole buffer does)."""
        link = self.roofs.interconnect
        if self.tp <= 1 or link is None or num_tokens <= 0:
            return 0.0
        c = self.config
        per_layer = allreduce_time_s(num_tokens * c.hidden_size * self._act_bytes, self.tp, link)
        logits = allreduce_time_s(num_logits * c.vocab_size * 4.0 / 2, self.tp, link)
        return 2 * c.num_hidden_layers * per_layer + logits

    def predict(
        self, batch: Batch, num_draft_seqs: int = 0, draft_tokens: int = 0, draft_context: int = 0
    ) -> StepTime:
        """The time of one step of composition ``batch`` (scalars).

        ``num_draft_seqs`` sequences carry drafts of ``draft_tokens`` tokens each, proposed by
        the draft model over a mean context of ``draft_context`` tokens.
        """
        if batch.num_tokens <= 0:
            return StepTime(0.0, 0.0, 0.0, 0.0, 0.0)
        cost = self.cost.step(batch)
        draft_s = 0.0
        if self.draft is not None and num_draft_seqs and draft_tokens:
            one = self.draft.predict(Batch.decode(num_draft_seqs, max(1, draft_context)))
            draft_s = draft_tokens * one.total_s
        return StepTime(
            compute_s=float(cost.flops) / self.roofs.flops_per_s,
            memory_s=float(cost.bytes) / self.roofs.bytes_per_s,
            comm_s=self.comm_s(float(batch.num_tokens), float(batch.num_logits)),
            overhead_s=self.step_overhead_s + self.seq_overhead_s * float(batch.num_seqs),
            draft_s=draft_s,
        )

    def predict_many(self, batch: Batch) -> np.ndarray:
        """Kernel + overhead time of many steps at once (arrays; no collectives, no drafts):
        what a calibration fits against."""
        cost = self.cost.step(batch)
        kernels = np.maximum(
            np.asarray(cost.flops) / self.roofs.flops_per_s,
            np.asarray(cost.bytes) / self.roofs.bytes_per_s,
        )
        return kernels + self.step_overhead_s + self.seq_overhead_s * np.asarray(batch.num_seqs)

    def describe(self) -> dict[str, Any]:
        """JSON-safe: the roofs, precision, TP degree and overheads this model predicts with."""
        return {
            "roofs": self.roofs.to_dict(),
            "precision": self.cost.precision.to_dict(),
            "tp": self.tp,
            "step_overhead_s": self.step_overhead_s,
            "seq_overhead_s": self.seq_overhead_s,
            "weight_bytes_per_gpu": self.cost.weight_bytes,
            "kv_bytes_per_token_per_gpu": self.cost.kv_bytes_per_token,
            "draft": self.draft.describe() if self.draft else None,
        }
