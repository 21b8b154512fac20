"""A request's images: each chat API's parts in the body, what a dataset's images column may hold
(paths, bytes, Hugging Face's image struct, URLs) and what it refuses, the Locust wire form, and
the image columns of a record."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from loadgen.client.apis import generation_body
from loadgen.client.readers.openai_stream import StreamAccumulator
from loadgen.clock import RunClock
from loadgen.drivers.locust.job import spec_from_wire, spec_to_wire
from loadgen.request_images import ImageError, as_images, data_url, image_tokens
from loadgen.request_spec import RequestSpec
from loadgen.workloads.dataset import DatasetSource, dataset_requests
from loadgen.workloads.images import synthetic_image
from loadgen.workloads.rows import RowReport
from loadgen.workloads.spec import WorkloadSpec
from results.folder.records import REQUEST_COLUMNS
from tests.support.tokenizers import make_tokenizer

TOK = make_tokenizer()
PNG = synthetic_image(20, 10, "png", np.random.default_rng(1))
URL = data_url(PNG)
HTTP = "http://127.0.0.1:9/cat.png"


def _spec(api: str, **kw: object) -> RequestSpec:
    return RequestSpec("r", "kalo", 1, 4, api=api, images=(URL, HTTP), **kw)  # type: ignore[arg-type]


def test_chat_sends_text_then_image_url_parts_in_the_last_user_turn() -> None:
    turns = (("system", "be brief"), ("user", "first"), ("assistant", "ok"), ("user", "kalo"))
    body = generation_body(_spec("chat", messages=turns), "m")
    assert body["messages"][:3] == [{"role": "system", "content": "be brief"},
                                    {"role": "user", "content": "first"},
                                    {"role": "assistant", "content": "ok"}]  # fmt: skip
    assert body["messages"][3] == {"role": "user", "content": [
        {"type": "text", "text": "kalo"},
        {"type": "image_url", "image_url": {"url": URL}},
        {"type": "image_url", "image_url": {"url": HTTP}},
    ]}  # fmt: skip


def test_responses_and_messages_send_their_own_forms() -> None:
    responses = generation_body(_spec("responses"), "m")["input"]
    assert responses == [{"role": "user", "content": [
        {"type": "input_text", "text": "kalo"},
        {"type": "input_image", "image_url": URL},
        {"type": "input_image", "image_url": HTTP},
    ]}]  # fmt: skip
    messages = generation_body(_spec("messages"), "m")["messages"]
    assert messages[0]["content"][1:] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": base64.b64encode(PNG).decode()}},
        {"type": "image", "source": {"type": "url", "url": HTTP}},
    ]  # fmt: skip


def test_a_completions_request_takes_no_images_and_the_wire_form_keeps_them() -> None:
    with pytest.raises(ValueError, match=r"RequestSpec.images: only \['chat', 'messages'"):
        RequestSpec("r", "kalo", 1, 4, api="completions", images=(URL,))
    spec = _spec("chat")
    assert spec_from_wire(json.loads(json.dumps(spec_to_wire(spec)))) == spec


def test_a_cell_may_hold_paths_bytes_structs_and_urls(tmp_path: Path) -> None:
    (tmp_path / "a.png").write_bytes(PNG)
    assert as_images("a.png", tmp_path) == (URL,)
    assert as_images(PNG) == (URL,)
    assert as_images({"bytes": PNG, "path": None}) == (URL,)
    assert as_images({"bytes": None, "path": "a.png"}, tmp_path) == (URL,)
    assert as_images(json.dumps([HTTP, "a.png"]), tmp_path) == (HTTP, URL)
    assert as_images(np.array([HTTP], dtype=object)) == (HTTP,)
    assert as_images(None) == () == as_images("") == as_images([])
    with pytest.raises(ImageError, match=r"image file 'b.png': No such file"):
        as_images("b.png", tmp_path)
    with pytest.raises(ImageError, match=r"not an image \(5 bytes\)"):
        as_images(b"kalo!")
    with pytest.raises(ImageError, match=r"data URL .*expected data:image/<type>;base64"):
        as_images("data:text/plain,kalo")


def test_a_dataset_images_column_reaches_its_rows_and_bad_cells_are_refused(
    tmp_path: Path,
) -> None:
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "a.png").write_bytes(PNG)
    rows = pd.DataFrame({
        "prompt": ["kalo strings", "kalo mine", "pro ion", "ed at"],
        "max_tokens": [4, 4, 4, 4],
        "picture": [{"bytes": PNG, "path": "a.png"}, {"bytes": None, "path": "img/a.png"},
                    {"bytes": None, "path": "img/missing.png"}, None],
    })  # fmt: skip
    path = tmp_path / "rows.parquet"
    rows.to_parquet(path)
    source = DatasetSource(columns={"images": "picture"})
    report = RowReport(str(path))
    workload = WorkloadSpec(kind="dataset", path=str(path))
    specs = dataset_requests(workload, source, TOK, 3, 0, "chat", report=report)
    assert [s.images for s in specs] == [(URL,), (URL,), ()]
    assert dict(report.refused) == {"images: image file 'img/missing.png': No such file or "
                                    "directory": 1}  # fmt: skip
    completions = RowReport(str(path))
    dataset_requests(workload, source, TOK, 3, 0, "completions", report=completions)
    assert completions.refused["images on the completions API (set api = 'chat', 'responses' "
                               "or 'messages')"] == 2  # fmt: skip


def test_the_record_counts_the_images_and_the_tokens_beyond_the_text() -> None:
    assert {"images", "image_tokens"} <= set(REQUEST_COLUMNS)
    # The record every reader makes (StreamAccumulator.to_record), the server's usage in it.
    acc = StreamAccumulator("chat", 4)
    acc.usage = {"prompt_tokens": 90, "completion_tokens": 4}
    spec = _spec("chat")
    record = acc.to_record(
        spec=spec, user_id=0, scheduled_s=0.0, sent_ns=0, end_ns=1, clock=RunClock(),
        tokenizer=None, status="ok", error=None, http_status=200,
    )  # fmt: skip
    assert record.usage_prompt_tokens == 90
    assert (record.images, record.image_tokens) == (2, 89)
    assert image_tokens(0, 90, 1) is None and image_tokens(2, None, 1) is None
    assert image_tokens(1, 3, 5) == 0
