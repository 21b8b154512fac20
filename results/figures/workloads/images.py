"""The images a run's requests sent: summary.json's ``images``.

Over the ok requests of the measured window (results.figures.summary.WINDOW_RULE), from
requests.parquet's ``images`` and ``image_tokens`` (results.folder.records): how many requests
sent images and how many in all; what the server counted for them (``image_tokens``: its
``usage.prompt_tokens`` beyond the text's own tokens, the chat template's few tokens in it),
per request and per image; where some requests sent no image, the same excess of theirs (the
template's own tokens, as the server counts them) and, less it, the tokens one image costs;
and the TTFT at each image count (one row per count sent, 0 included), which shows what the
images' prefill (and the vision encoder's work) adds to the first token.

Present when the scenario sent images (its ``[images]``) or any request carried one (a
dataset's own images).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from perfmodel.files import JSONObject, JSONView
from results.figures.attribution import measured_requests
from results.figures.summary import LATENCY_PERCENTILES, distribution

__all__ = ["images_line", "images_summary", "ttft_by_images_rows"]


def _ints(requests: pd.DataFrame, column: str) -> np.ndarray:
    return requests[column].to_numpy(dtype=np.float64, na_value=np.nan)


def _ttft_by_count(counts: np.ndarray, ttft_ms: np.ndarray) -> list[JSONObject]:
    """One row per image count: ``images``, and the TTFT distribution's figures (ms)."""
    rows = []
    for k in sorted({int(c) for c in counts}):
        stats = distribution(ttft_ms[counts == k], LATENCY_PERCENTILES)
        rows.append({"images": k, **stats})
    return rows


def images_summary(requests: pd.DataFrame, window: JSONView, sent: bool) -> JSONObject | None:
    """``requests`` (measured ok ones), ``requests_with_images``, ``images`` (summed),
    ``images_per_request`` (mean over those with images), ``image_tokens`` (distribution per
    request with images, of the server's usage), ``image_tokens_per_image`` (their sum over
    the images', where usage was reported), ``text_only_excess_tokens`` (median of the same
    excess over the requests without images; None without such requests),
    ``tokens_per_image`` (per image, that excess taken off; None without it) and
    ``ttft_ms_by_images`` (a list, one row per image count); None when the run sent no images
    (module docstring)."""
    if "images" not in requests.columns:
        return None
    counts_all = requests["images"].to_numpy(dtype=np.int64, na_value=0)
    if not sent and not counts_all.any():
        return None
    ok = measured_requests(requests, window) & (requests["status"] == "ok").to_numpy()
    counts = counts_all[ok]
    with_images = counts > 0
    extra = _ints(requests, "image_tokens")[ok]
    excess = (_ints(requests, "usage_prompt_tokens") - _ints(requests, "client_prompt_tokens"))[ok]
    reported = with_images & ~np.isnan(extra)
    per_image = float(extra[reported].sum() / counts[reported].sum()) if reported.any() else None
    text_only = excess[~with_images & ~np.isnan(excess)]
    baseline = float(np.median(text_only)) if text_only.size else None
    net = (
        float(((extra[reported] - baseline) / counts[reported]).mean())
        if baseline is not None and reported.any()
        else None
    )
    ttft_ms = (_ints(requests, "first_token_s") - _ints(requests, "sent_s"))[ok] * 1e3
    return {
        "requests": int(ok.sum()),
        "requests_with_images": int(with_images.sum()),
        "images": int(counts.sum()),
        "images_per_request": float(counts[with_images].mean()) if with_images.any() else None,
        "image_tokens": distribution(extra[with_images], LATENCY_PERCENTILES),
        "image_tokens_per_image": per_image,
        "text_only_excess_tokens": baseline,
        "tokens_per_image": net,
        "ttft_ms_by_images": _ttft_by_count(counts, ttft_ms),
    }


def images_line(section: JSONView | None) -> str | None:
    """The terminal's line on images, or None for a run without the section."""
    if not section:
        return None
    if not section["requests"]:
        return "images: no request with or without images was answered ok, so none is counted"
    line = (
        f"images: {section['images']:,} sent by {section['requests_with_images']:,} of "
        f"{section['requests']:,} requests"
    )
    per = section.get("image_tokens_per_image")
    if per is None:
        line += "; the server reported no usage, so no image tokens"
    else:
        line += f"; {per:,.1f} prompt tokens per image beyond the text"
        if (net := section.get("tokens_per_image")) is not None:
            line += f" ({net:,.1f} less the chat template's own)"
    return line


def ttft_by_images_rows(section: JSONView | None) -> list[tuple[str, str, str, str]]:
    """The terminal table's rows of TTFT by image count: images, requests, p50 and p99 (ms);
    none where every request sent the same count (the latency table says it all then)."""
    rows = (section or {}).get("ttft_ms_by_images") or []
    if len(rows) < 2:
        return []

    def ms(value: Any) -> str:
        return "–" if value is None else f"{value:,.1f}"

    return [(str(r["images"]), f"{r['count']:,}", ms(r.get("p50")), ms(r.get("p99"))) for r in rows]
