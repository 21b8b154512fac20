"""What the lectures claim each optimization buys, declared once as data.

A claim names the figure it is about (a key of bench.experiments.ablation_metrics'
ABLATION_COLUMNS), which way its ratio is taken (the technique on over off, or off over on for
a figure where lower is better), and the range the lectures give for that ratio. Two ranges are
not plain numbers: the KV cache's speedup is "on the order of the sequence length" and GQA's KV
cache is "1/group", so their bounds are multiples of a scale read from the run (``scale``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# How a claimed bound is scaled: "1" as given; "sequence length" by the mean tokens per
# request (prompt plus output); "1/group" by KV heads over query heads of the model measured.
Scale = Literal["1", "sequence length", "1/group"]
# technique-on value over technique-off value, or the inverse (a time, a size saved).
Ratio = Literal["on/off", "off/on"]


@dataclass(frozen=True)
class Claim:
    """One row of the lectures' table.

    ``low``/``high`` bound the ratio (times ``scale``); None where the lectures give no figure.
    ``also``: further ablation figures shown beside the claimed one (KV waste, concurrency).
    """

    technique: str
    title: str
    claim: str
    metric: str
    ratio: Ratio
    low: float | None
    high: float | None
    scale: Scale = "1"
    also: tuple[str, ...] = ()

    def ratio_of(self, off: float | None, on: float | None) -> float | None:
        """The claimed figure's ratio from its values with the technique off and on."""
        if off is None or on is None:
            return None
        num, den = (on, off) if self.ratio == "on/off" else (off, on)
        return num / den if den else None

    def bounds(self, scale_value: float | None) -> tuple[float | None, float | None]:
        """The claimed range of the ratio for a run whose scale is ``scale_value``."""
        if self.scale == "1":
            return self.low, self.high
        if scale_value is None:
            return None, None
        low = None if self.low is None else self.low * scale_value
        high = None if self.high is None else self.high * scale_value
        return low, high


CLAIMS: tuple[Claim, ...] = (
    Claim(
        "kv_cache", "KV cache",
        "speedup on the order of the sequence length (recomputing K/V costs O(n) per token)",
        "output_tok_s", "on/off", 0.1, 1.0, scale="sequence length",
    ),
    Claim(
        "gqa", "GQA / MQA",
        "KV cache 1/group of multi-head attention's (group = query heads per KV head)",
        "kv_used_peak_bytes", "on/off", 1.0, 1.0, scale="1/group", also=("max_running",),
    ),
    Claim(
        "int8", "INT8 weights", "~1.5-2x faster decode (half the weight bytes of 16-bit)",
        "output_tok_s", "on/off", 1.5, 2.0, also=("weight_bytes",),
    ),
    Claim(
        "int4", "INT4 weights (GPTQ/AWQ)", "~2-3x faster decode (a quarter of the weight bytes)",
        "output_tok_s", "on/off", 2.0, 3.0, also=("weight_bytes",),
    ),
    Claim(
        "speculative", "Speculative decoding", "~2-3x faster per user (several tokens per step)",
        "tps_p50", "on/off", 2.0, 3.0, also=("acceptance_rate",),
    ),
    Claim(
        "continuous_batching", "Continuous batching",
        "~2-4x throughput over static batching", "output_tok_s", "on/off", 2.0, 4.0,
        also=("max_running",),
    ),
    Claim(
        "paged_attention", "PagedAttention",
        "~2-4x throughput; KV waste from 60-80% down to ~4%", "output_tok_s", "on/off",
        2.0, 4.0, also=("kv_waste", "max_running"),
    ),
    Claim(
        "flash_attention", "Flash Attention",
        "~2-4x faster attention (the scores never leave on-chip memory)",
        "ttft_p50_ms", "off/on", 2.0, 4.0,
    ),
    Claim(
        "prefix_caching", "Prefix caching",
        "a shared prefix is prefilled once: TTFT falls with the share of the prompt it covers",
        "ttft_p50_ms", "off/on", None, None, also=("prefix_hit_rate",),
    ),
)  # fmt: skip


def claim(technique: str) -> Claim:
    """The claim of ``technique``; KeyError naming the known ones."""
    for c in CLAIMS:
        if c.technique == technique:
            return c
    raise KeyError(f"no claim for {technique!r}; known: {', '.join(c.technique for c in CLAIMS)}")
