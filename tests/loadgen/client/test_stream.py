"""The streaming client against a real local HTTP server: the captured fixtures, token counting,
chunk timing, keep-alive and the connection bound (failures: test_loadgen_client_errors.py)."""

from __future__ import annotations

import asyncio
import itertools
import json

import pytest

from loadgen.client.stream import StreamingClient
from loadgen.clock import RunClock
from results.folder.records import RequestRecord
from tests.support.http_server import HttpRequest, LocalServer, Response, run
from tests.support.loadgen_requests import send_once, spec
from tests.support.sse_streams import FIXTURE_STREAMS, fixture_events, replay_handler, text_events
from tests.support.tokenizers import make_tokenizer

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize("split_bytes", [None, 7], ids=["one-write-per-event", "7-byte-writes"])
@pytest.mark.parametrize("name", sorted(FIXTURE_STREAMS))
def test_fixture_streams_count_usage_once(name: str, split_bytes: int | None) -> None:
    api = FIXTURE_STREAMS[name][1]
    usage = next(
        json.loads(e[len(b"data: ") :])["usage"] for e in fixture_events(name) if b'"usage"' in e
    )

    async def main() -> tuple[RequestRecord, list[HttpRequest]]:
        handler = replay_handler(fixture_events(name), split_bytes=split_bytes)
        async with (
            LocalServer(handler) as server,
            StreamingClient(server.base_url, "tiny-llama", 1, tokenizer=make_tokenizer()) as client,
        ):
            clock = RunClock()
            record = await client.send(spec(api), 3, clock.now_s(), clock)
            return record, server.requests

    record, requests = run(main())
    assert record.status == "ok", record.error
    assert record.error is None and record.http_status == 200
    assert record.output_tokens == usage["completion_tokens"] == 4
    assert record.output_tokens_source == "usage"
    assert record.prompt_tokens == usage["prompt_tokens"]
    # Role-only, finish-only and usage-only chunks are not content.
    assert [c.n_tokens for c in record.chunks] == [1, 1, 1, 1]
    assert [c.index for c in record.chunks] == [0, 1, 2, 3]
    assert record.first_token_s == record.chunks[0].t_s
    assert record.scheduled_s <= record.sent_s <= record.first_token_s <= record.done_s
    assert all(a.t_s <= b.t_s for a, b in itertools.pairwise(record.chunks))
    assert record.user_id == 3
    (request,) = requests
    body = request.json()
    assert request.path == ("/v1/chat/completions" if api == "chat" else "/v1/completions")
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["model"] == "tiny-llama" and body["max_tokens"] == 4
    if api == "chat":
        assert body["messages"] == [{"role": "user", "content": "kalo strings"}]
    else:
        assert body["prompt"] == "kalo strings"


def test_chunk_times_follow_the_server() -> None:
    delay_s = 0.04
    record = run(
        send_once(
            replay_handler(
                text_events(["a", "b", "c", "d"], {"completion_tokens": 4}), delay_s=delay_s
            ),
            spec(),
        )
    )
    assert record.status == "ok"
    assert record.first_token_s - record.sent_s >= delay_s * 0.9
    gaps = [b.t_s - a.t_s for a, b in itertools.pairwise(record.chunks)]
    assert all(delay_s * 0.9 <= gap < delay_s + 0.1 for gap in gaps), gaps


def test_no_usage_counts_with_the_tokenizer() -> None:
    tok = make_tokenizer()
    texts = ["kalo", " strings", " tra", "ka mi"]
    record = run(send_once(replay_handler(text_events(texts)), spec(), tokenizer=tok))
    assert record.status == "ok"
    assert record.output_tokens_source == "tokenizer"
    assert record.output_tokens == len(tok.encode("".join(texts)))
    assert record.prompt_tokens == 3  # from the spec, since the server sent none
    assert sum(c.n_tokens for c in record.chunks) == record.output_tokens


def test_no_usage_and_no_tokenizer_counts_chunks() -> None:
    record = run(send_once(replay_handler(text_events(["x", "y", "z"])), spec()))
    assert (record.output_tokens, record.output_tokens_source) == (3, "chunks")


def test_multi_token_chunks_are_apportioned_to_the_usage_total() -> None:
    tok = make_tokenizer()
    texts = ["kalo", " strings tra ka mi ne lo strings", "!", " pro at th er ing"]
    events = text_events(texts, {"completion_tokens": 17, "prompt_tokens": 3})
    record = run(send_once(replay_handler(events), spec(), tokenizer=tok))
    n_tokens = [c.n_tokens for c in record.chunks]
    assert record.output_tokens == 17 and record.output_tokens_source == "usage"
    assert sum(n_tokens) == 17 and min(n_tokens) >= 1
    assert n_tokens[1] > n_tokens[0] and n_tokens[1] > n_tokens[2]


def test_cumulative_usage_in_every_chunk_is_not_summed() -> None:
    events = text_events(["a", "b", "c"], usage_every_chunk=True)
    record = run(send_once(replay_handler(events), spec()))
    assert (record.output_tokens, record.output_tokens_source) == (3, "usage")


def test_sequential_requests_reuse_one_connection() -> None:
    async def main() -> int:
        events = fixture_events("llama-completions")
        async with (
            LocalServer(replay_handler(events)) as server,
            StreamingClient(server.base_url, "m", 1, api_key="sk-test") as client,
        ):
            for i in range(5):
                record = await client.send(spec(request_id=f"r{i}"), 0, 0.0, RunClock())
                assert record.status == "ok"
            assert server.requests[0].headers["authorization"] == "Bearer sk-test"
            return server.connections

    assert run(main()) == 1


def test_request_body_options() -> None:
    client = StreamingClient("http://127.0.0.1:1/v1/", "m", 1, extra_body={"top_k": 5})
    body = json.loads(client.request_body(spec(ignore_eos=True, seed=11, temperature=0.5)))
    assert body["ignore_eos"] is True and body["seed"] == 11 and body["temperature"] == 0.5
    assert body["top_k"] == 5
    assert "ignore_eos" not in json.loads(client.request_body(spec()))
    assert client.api_root == "http://127.0.0.1:1/v1"
    with pytest.raises(ValueError, match="base_url"):
        StreamingClient("127.0.0.1:8000", "m", 1)
    with pytest.raises(ValueError, match="max_connections"):
        StreamingClient("http://x", "m", 0)


class BrokenTokenizer:
    vocab_size = 10

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        raise RuntimeError("tokenizer exploded")

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return ""


def test_a_broken_tokenizer_does_not_lose_the_request() -> None:
    events = text_events(["a", "b"])
    record = run(send_once(replay_handler(events), spec(), tokenizer=BrokenTokenizer()))
    assert record.status == "error" and "tokenizer exploded" in record.error
    assert (record.output_tokens, record.output_tokens_source) == (2, "chunks")


def slow_stream_handler(n_events: int, delay_s: float):
    async def handler(request: HttpRequest, response: Response) -> None:
        await response.start_stream()
        for event in text_events(["x"] * n_events, {"completion_tokens": n_events}):
            await asyncio.sleep(delay_s)
            await response.send(event)
        await response.end()

    return handler


def test_connections_bound_concurrency_and_a_long_wait_is_a_pool_timeout() -> None:
    async def main(n_requests: int, timeout_s: float) -> tuple[list[RequestRecord], int, int]:
        async with (
            LocalServer(slow_stream_handler(5, 0.04)) as server,
            StreamingClient(server.base_url, "m", 3, timeout_s=timeout_s) as client,
        ):
            clock = RunClock()
            sends = [
                client.send(spec(request_id=f"r{i}"), i, 0.0, clock) for i in range(n_requests)
            ]
            records = await asyncio.gather(*sends)
            return records, server.max_in_flight, server.connections

    records, max_in_flight, connections = run(main(6, 5.0))
    assert [r.status for r in records] == ["ok"] * 6
    assert max_in_flight == 3 and connections == 3
    # Requests that waited for a slot show it as client lag (sent_s - scheduled_s).
    assert sorted(r.sent_s - r.scheduled_s > 0.2 for r in records).count(True) == 3

    records, _, _ = run(main(4, 0.2))
    errors = [r.error for r in records if r.status == "error"]
    assert len(errors) == 1 and "PoolTimeout" in errors[0] and "max_connections" in errors[0]
