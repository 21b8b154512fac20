"""Token reconciliation: each request's tokens as the client counted them beside the server's.

A throughput figure is only as good as its token count, and the counts disagree more often than
users expect: a client that re-encodes the streamed text with a tokenizer other than the
server's, or that decodes and re-encodes across chunk boundaries, can inflate output tokens by
1.75-2x (Kubernetes inference-perf found exactly that), and a chat template adds prompt tokens
the client never sees. summary.json's "token_reconciliation" puts the three counts side by side:

- client: the workload's tokenizer (requests.parquet ``client_prompt_tokens``; the received
  text re-encoded, ``client_output_tokens``);
- server: each response's usage (``usage_prompt_tokens``, ``usage_output_tokens``);
- engine: the increase of the engine's own counters over the run (samples.parquet's
  ``prompt_tokens_total`` and ``generation_tokens_total``, when /metrics was scraped), against
  the tokens of every request the engine answered (usage where sent, else as counted), since a
  counter counts failed and cancelled requests' work too.

Each comparison gives the totals, their ratio (other / server) and how many requests differ by
more than :data:`REQUEST_TOLERANCE` of the server's count (and more than
:data:`SPECIAL_TOKEN_ALLOWANCE` tokens: a server counts the BOS token the client leaves out).
What is judged, and so can mark the run (results.validity.run_validity):

- prompt tokens, client against usage: *exceeds* when more than :data:`MAX_TOKEN_MISMATCH` of
  the requests are off. The prompts were then not the lengths the scenario asked for: the
  client's tokenizer is not the server's. Chat prompts are compared but not judged: the server
  counts its chat template, which the client never tokenizes.
- the engine's generated-token counter against usage: *exceeds* when the totals are more
  than :data:`MAX_TOKEN_MISMATCH` apart (the server's usage is not what its engine generated).
  Its prompt counter is compared but not judged: llama.cpp counts only the prompt tokens it
  computed, leaving prefix-cache hits out.

Output tokens re-counted by the client are compared but not judged: the figures use the
server's usage wherever it was sent, and the comparison shows what a tool that re-tokenizes
the streamed text would have reported instead (decoding then encoding is not lossless).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from perfmodel.files import JSONObject, JSONView
from results.folder import sample_sources
from results.schema.api_kinds import APIS, api_kind

# The share of requests off (or, for the engine's counters, the relative difference of the
# totals) above which a run's token counts are not trusted.
MAX_TOKEN_MISMATCH = 0.05
# A single request differs when its counts are further apart than this share of the server's
# count and than SPECIAL_TOKEN_ALLOWANCE tokens (BOS, and EOS where a server counts it).
REQUEST_TOLERANCE = 0.02
SPECIAL_TOKEN_ALLOWANCE = 2
_TOP = 5


def _pair(
    requests: pd.DataFrame, other: str, server: str, *, what: str, other_by: str, judged: bool,
    note: str | None = None,
) -> JSONObject | None:  # fmt: skip
    """The comparison of column ``other`` with column ``server`` over the rows having both."""
    if other not in requests or server not in requests:
        return None
    both = requests[requests[other].notna() & requests[server].notna()]
    if both.empty:
        return None
    a = both[other].to_numpy(dtype=np.float64)
    b = both[server].to_numpy(dtype=np.float64)
    off = np.abs(a - b) > np.maximum(float(SPECIAL_TOKEN_ALLOWANCE), REQUEST_TOLERANCE * b)
    a_total, b_total = float(a.sum()), float(b.sum())
    ratio = a_total / b_total if b_total else None
    exceeds = judged and float(off.mean()) > MAX_TOKEN_MISMATCH
    worst = np.argsort(-np.abs(a - b), kind="stable")[:_TOP]
    return {
        "what": what,
        "counted_by": [other_by, "usage"],
        "requests": len(both),
        "other_total": int(a_total),
        "server_total": int(b_total),
        "ratio": ratio,
        "mean_difference": float(np.mean(a - b)),
        "requests_off": int(off.sum()),
        "share_off": float(off.mean()),
        "judged": judged,
        "exceeds": bool(exceeds),
        "note": note,
        "worst": [
            {
                "request_id": str(both["request_id"].iloc[i]),
                other_by: int(a[i]),
                "usage": int(b[i]),
            }
            for i in worst
            if off[i]
        ],
    }


def _counter_increase(samples: pd.DataFrame | None, name: str) -> float | None:
    """Sum over series of last - first reading of engine counter ``name`` over the whole run."""
    if samples is None or samples.empty:
        return None
    rows = samples[(samples["source"] == sample_sources.ENGINE) & (samples["name"] == name)]
    if rows.empty:
        return None
    total = 0.0
    for _, series in rows.groupby("labels", sort=True):
        values = series.sort_values("t_s", kind="mergesort")["value"].to_numpy(dtype=np.float64)
        total += float(values[-1] - values[0])
    return total


def _engine_pair(
    requests: pd.DataFrame, samples: pd.DataFrame | None, counter: str, column: str, what: str,
    judged: bool = True,
) -> JSONObject | None:  # fmt: skip
    """The engine counter's increase against the tokens of the requests it answered."""
    increase = _counter_increase(samples, counter)
    if increase is None or requests.empty:
        return None
    answered = requests[requests["http_status"].fillna(0).astype(int) == 200]
    usage_col = f"usage_{column}"
    counted = answered[column].to_numpy(dtype=np.float64)
    if usage_col in answered:
        usage = answered[usage_col].to_numpy(dtype=np.float64, na_value=np.nan)
        counted = np.where(np.isnan(usage), counted, usage)
    expected = float(counted.sum())
    ratio = increase / expected if expected else None
    return {
        "what": what,
        "counted_by": ["engine counter", "usage"],
        "requests": len(answered),
        "other_total": round(increase),
        "server_total": int(expected),
        "ratio": ratio,
        "judged": judged,
        "exceeds": judged and ratio is not None and abs(ratio - 1.0) > MAX_TOKEN_MISMATCH,
        "note": f"the increase of {counter} over the run, against every answered request's "
        "tokens (failed and cancelled ones included: the engine counted their work)"
        + ("" if judged else "; not judged: some engines leave prefix-cache hits out of it"),
    }


def token_reconciliation(
    requests: pd.DataFrame,
    samples: pd.DataFrame | None,
    api: str | None,
    simulated: bool = False,
) -> JSONObject:
    """summary.json's "token_reconciliation" (module docstring); ``simulated``: the run's
    engine ran on the simulated device, whose counts are its own scheduler's, with no server
    between (`bench simulate` printed "Output tokens ... (usage)" and then "the server sent no
    usage")."""
    if simulated:
        return {
            "available": False,
            "reason": "a simulated run counts its tokens from the engine's own records: there "
            "is no server count to reconcile with",
        }
    kind = api_kind(api) if api in APIS else None
    if kind is not None and kind.pooling:
        return {
            "available": False,
            "reason": f"an {api} run generates no output tokens; its input tokens are the "
            "server's usage (summary.json's pooling)",
        }
    if "usage_output_tokens" not in requests or requests["usage_output_tokens"].isna().all():
        return {
            "available": False,
            "reason": "the server sent no usage (or the folder predates the per-source counts): "
            "there is no server count to reconcile with",
        }
    ok = requests[requests["status"] == "ok"]
    # A conversation's prompt goes through the server's chat template.
    chat = kind is not None and kind.conversation
    comparisons = [
        _pair(ok, "client_output_tokens", "usage_output_tokens", what="output tokens",
              other_by="tokenizer", judged=False,
              note="the figures use the server's usage; this is what re-tokenizing the "
                   "streamed text would report instead"),
        _pair(ok, "client_prompt_tokens", "usage_prompt_tokens", what="prompt tokens",
              other_by="tokenizer", judged=not chat,
              note="chat: the server counts its chat template, which the client does not "
                   "tokenize; mean_difference is the template's tokens" if chat else None),
        _engine_pair(requests, samples, "generation_tokens_total", "output_tokens",
                     "output tokens (engine)"),
        _engine_pair(requests, samples, "prompt_tokens_total", "prompt_tokens",
                     "prompt tokens (engine)", judged=False),
    ]  # fmt: skip
    present = [c for c in comparisons if c is not None]
    exceeded = [c for c in present if c["exceeds"]]
    return {
        "available": True,
        "max_mismatch": MAX_TOKEN_MISMATCH,
        "request_tolerance": REQUEST_TOLERANCE,
        "comparisons": present,
        "mismatched": bool(exceeded),
        "messages": [mismatch_line(c) for c in exceeded],
    }


def mismatch_line(comparison: JSONView) -> str:
    """One line saying how far apart a judged comparison is, and what it means."""
    by, _ = comparison["counted_by"]
    ratio = comparison["ratio"]
    head = (
        f"{comparison['what']}: {by} counted {comparison['other_total']:,} against the server's "
        f"{comparison['server_total']:,} ({ratio:.2f}x)"
    )
    if "requests_off" in comparison:
        return (
            f"{head}, {comparison['requests_off']:,} of {comparison['requests']:,} requests off: "
            "the prompts were not the lengths asked for; give --tokenizer the served model's "
            "tokenizer"
        )
    return (
        f"{head}, more than {100 * MAX_TOKEN_MISMATCH:.0f}% apart: the server's usage is not "
        "what its engine counted; the tokens/s figures are in doubt"
    )


def reconciliation_lines(section: JSONView | None) -> list[str]:
    """One sentence per comparison (report.html), or why there is none; [] for an older
    summary."""
    if not isinstance(section, Mapping):
        return []
    if not section.get("available"):
        return [f"No token reconciliation: {section.get('reason')}."]
    lines = []
    for c in section.get("comparisons") or []:
        by = c["counted_by"][0]
        ratio = c.get("ratio")
        verdict = (
            "more than the tolerance apart: the run is marked"
            if c.get("exceeds")
            else ("not judged" if not c.get("judged") else "within tolerance")
        )
        off = c.get("requests_off")
        lines.append(
            f"{c['what']}: {by} {c['other_total']:,} vs usage {c['server_total']:,}"
            + (f" ({ratio:.3f}x)" if ratio is not None else "")
            + (f", {off:,} of {c['requests']:,} requests off" if off is not None else "")
            + f"; {verdict}."
            + (f" {c['note']}." if c.get("note") else "")
        )
    return lines
