"""summary.json's images section from requests.parquet's columns: counts over the measured ok
requests, the tokens per image with and without the template's excess, TTFT by image count,
and the terminal's line and table; no section for a run that sent no image."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bench.run.end.images_report import images_table
from results.figures.workloads.images import images_line, images_summary, ttft_by_images_rows

WINDOW = {"start_s": 0.0, "end_s": 100.0}


def _requests() -> pd.DataFrame:
    # Text 10 tokens each; the server adds 3 template tokens and 7 a picture.
    images = [0, 0, 1, 2, 2, 3, 1]
    status = ["ok"] * 6 + ["error"]
    usage = [13.0, 13.0, 20.0, 27.0, 27.0, 34.0, np.nan]
    first = [1.1, 1.2, 1.3, 1.4, 1.5, 1.6, None]
    extra = [np.nan if k == 0 or u != u else u - 10 for k, u in zip(images, usage, strict=True)]
    return pd.DataFrame({
        "request_id": [f"r{i}" for i in range(7)], "status": status, "scheduled_s": 1.0,
        "sent_s": [1.0] * 7, "first_token_s": first, "done_s": 2.0, "images": images,
        "client_prompt_tokens": 10, "usage_prompt_tokens": usage, "image_tokens": extra,
    })  # fmt: skip


def test_the_section_counts_the_ok_requests_and_takes_the_template_off() -> None:
    section = images_summary(_requests(), WINDOW, sent=True)
    assert section is not None
    assert (section["requests"], section["requests_with_images"], section["images"]) == (6, 4, 8)
    assert section["images_per_request"] == 2.0
    assert section["image_tokens"]["count"] == 4
    assert section["image_tokens_per_image"] == pytest.approx((10 + 17 + 17 + 24) / 8)
    assert section["text_only_excess_tokens"] == 3.0
    assert section["tokens_per_image"] == pytest.approx(7.0)
    rows = section["ttft_ms_by_images"]
    assert [(r["images"], r["count"]) for r in rows] == [(0, 2), (1, 1), (2, 2), (3, 1)]
    assert rows[0]["p50"] == pytest.approx(150.0) and rows[3]["max"] == pytest.approx(600.0)
    line = images_line(section)
    assert line == (
        "images: 8 sent by 4 of 6 requests; 8.5 prompt tokens per image beyond the text (7.0 "
        "less the chat template's own)"
    )
    assert ttft_by_images_rows(section)[0] == ("0", "2", "150.0", "199.0")
    table = images_table({"images": section})
    assert table is not None and table.row_count == 4


def test_no_section_without_images_and_none_of_the_template_without_text_only_requests() -> None:
    frame = _requests()
    assert images_summary(frame.assign(images=0), WINDOW, sent=False) is None
    assert images_summary(frame.drop(columns=["images"]), WINDOW, sent=True) is None
    only = images_summary(frame[frame["images"] > 0], WINDOW, sent=True)
    assert only is not None
    assert only["text_only_excess_tokens"] is None and only["tokens_per_image"] is None
    assert (
        images_table({"images": {**only, "ttft_ms_by_images": only["ttft_ms_by_images"][:1]}})
        is None
    )
    no_usage = frame.assign(usage_prompt_tokens=np.nan, image_tokens=np.nan)
    section = images_summary(no_usage, WINDOW, sent=True)
    assert section is not None and section["image_tokens_per_image"] is None
    assert "the server reported no usage" in str(images_line(section))
