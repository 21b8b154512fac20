"""A deterministic streaming server that knows the true timing of every chunk it sends.

    python benchmarks/truth_server.py --port 8100 --ttft-ms 50 --itl-ms 10 --out truth.json

It answers /v1/completions and /v1/chat/completions (stream=true, OpenAI/vLLM format, usage in
a final chunk with empty choices), /v1/models and /health, and sends ``max_tokens`` one-token
chunks (``--token-text``, default " to"): the first ``ttft_ms`` after the request arrived, then
one every ``itl_ms``. Like a
continuous-batching engine, one scheduler loop sends every chunk that is due, so thousands of
streams cost one timer, not thousands.

The truth: each chunk's actual send time is stamped (``time.perf_counter_ns`` just before the
socket write) into the chunk itself (``"t_send_ns"``) and into the server's log. So true TTFT =
first send - request arrival and true ITL = gaps between sends, whatever the server's own
timing errors; those it measures too, as lateness = actual send - planned send. On SIGTERM,
SIGINT or POST /shutdown it writes ``--out``: per-request truth and summary figures (ms); with
``--per-stream``, also every stream's first prompt word, arrival and send times (ns), so that
a client whose prompts start with their request id can be judged chunk by chunk.
Plain asyncio protocols; no framework, so the server's own overhead stays small and known.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import heapq
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

_NS = 1_000_000_000
_HEADERS = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n"
)


@dataclass
class Stream:
    """One request being answered."""

    transport: asyncio.Transport
    chat: bool
    tokens: int
    prompt_tokens: int
    arrival_ns: int
    key: str = ""  # the prompt's first word
    sent_ns: list[int] = field(default_factory=list)
    planned_ns: list[int] = field(default_factory=list)


class _Conn(asyncio.Protocol):
    """One client connection: requests parsed as bytes arrive, each stamped with the arrival of
    its first byte (before any parsing, so a burst of requests is not stamped late)."""

    def __init__(self, server: TruthServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.arrival_ns = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if not self.buffer:
            self.arrival_ns = time.perf_counter_ns()
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            lines = self.buffer[:end].decode("latin-1").split("\r\n")
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            method, path, _ = lines[0].split(" ", 2)
            self.server.dispatch(self, method, path, body, self.arrival_ns)
            self.arrival_ns = time.perf_counter_ns()


def _chunk(payload: bytes) -> bytes:
    """One HTTP/1.1 chunk."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


class TruthServer:
    """The server (module docstring); ``streams_done`` keeps every finished stream's truth."""

    def __init__(
        self, ttft_ms: float, itl_ms: float, model: str = "truth", token_text: str = " to"
    ) -> None:
        # Each chunk's text; pick one token of the clients' tokenizer, so that clients that
        # count tokens by tokenizing the text count one per chunk too.
        self.text = json.dumps(token_text)
        self.ttft_ns = int(ttft_ms * 1e6)
        self.itl_ns = int(itl_ms * 1e6)
        self.model = model
        self.heap: list[tuple[int, int, Stream]] = []
        self.wake = asyncio.Event()
        self.streams_done: list[Stream] = []
        self.stop = asyncio.Event()
        self._seq = 0

    def _event(self, stream: Stream, index: int, t_ns: int) -> bytes:
        last = index == stream.tokens - 1
        reason = '"length"' if last else "null"
        text = self.text
        if stream.chat:
            kind, choice = "chat.completion.chunk", f'"delta":{{"content":{text}}}'
        else:
            kind, choice = "text_completion", f'"text":{text}'
        body = (
            f'{{"id":"t","object":"{kind}","created":0,"model":"{self.model}",'
            f'"t_send_ns":{t_ns},"choices":[{{"index":0,{choice},"finish_reason":{reason}}}]}}'
        )
        out = b"data: " + body.encode() + b"\n\n"
        if last:
            usage = {"prompt_tokens": stream.prompt_tokens, "completion_tokens": stream.tokens,
                     "total_tokens": stream.prompt_tokens + stream.tokens}  # fmt: skip
            final = {"id": "t", "model": self.model, "choices": [], "usage": usage}
            out += b"data: " + json.dumps(final).encode() + b"\n\ndata: [DONE]\n\n"
        return _chunk(out) + (b"0\r\n\r\n" if last else b"")

    async def scheduler(self) -> None:
        """Send every due chunk; sleep until the next one is due."""
        heap = self.heap
        while not self.stop.is_set():
            if not heap:
                self.wake.clear()
                await self.wake.wait()
                continue
            delay_ns = heap[0][0] - time.perf_counter_ns()
            if delay_ns > 0:
                self.wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), delay_ns / _NS)
                continue
            now = time.perf_counter_ns()
            while heap and heap[0][0] <= now:
                planned, _, stream = heapq.heappop(heap)
                index = len(stream.sent_ns)
                t_ns = time.perf_counter_ns()
                stream.transport.write(self._event(stream, index, t_ns))
                stream.sent_ns.append(t_ns)
                stream.planned_ns.append(planned)
                if index + 1 < stream.tokens:
                    self._push(planned + self.itl_ns, stream)
                else:
                    self.streams_done.append(stream)
            await asyncio.sleep(0)  # let the transports flush and new requests in

    def _push(self, due_ns: int, stream: Stream) -> None:
        self._seq += 1
        heapq.heappush(self.heap, (due_ns, self._seq, stream))
        self.wake.set()

    def dispatch(self, conn: _Conn, method: str, path: str, body: bytes, arrival_ns: int) -> None:
        """Answer one parsed request (``arrival_ns``: its first byte's arrival)."""
        transport = conn.transport
        assert transport is not None
        if method == "POST" and path.endswith("/completions"):
            request = json.loads(body or b"{}")
            chat = path.endswith("/chat/completions")
            prompt = json.dumps(request.get("messages")) if chat else str(request.get("prompt", ""))
            asked = request.get("max_tokens") or request.get("max_completion_tokens") or 16
            stream = Stream(
                transport, chat, max(1, int(asked)), max(1, len(prompt) // 4), arrival_ns,
                key=prompt.split(" ", 1)[0],
            )  # fmt: skip
            transport.write(_HEADERS)
            self._push(arrival_ns + self.ttft_ns, stream)
        elif path.endswith("/shutdown"):
            self._respond(transport, 200, {"ok": True})
            self.stop.set()
        elif path.endswith("/models"):
            models = {"object": "list", "data": [{"id": self.model, "object": "model"}]}
            self._respond(transport, 200, models)
        else:
            self._respond(transport, 200 if path == "/health" else 404, {})

    def _respond(self, transport: asyncio.Transport, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        head = f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
        transport.write(head.encode() + b"Content-Length: %d\r\n\r\n%s" % (len(data), data))

    def truth(self, per_stream: bool = False) -> dict[str, Any]:
        """Per-request truth and its distributions (ms); ``per_stream``: with ``streams``, each
        ``[key, arrival_ns, [sent_ns, ...]]``."""
        ttft, itl, late = [], [], []
        for s in self.streams_done:
            sent = np.asarray(s.sent_ns, dtype=np.int64)
            ttft.append((sent[0] - s.arrival_ns) / 1e6)
            itl.extend((np.diff(sent) / 1e6).tolist())
            late.extend(((sent - np.asarray(s.planned_ns)) / 1e6).tolist())

        def stats(values: list[float]) -> dict[str, float | None]:
            arr = np.asarray(values, dtype=np.float64)
            if not arr.size:
                return {"count": 0, "p50": None, "p99": None, "mean": None, "max": None}
            return {"count": int(arr.size), "p50": float(np.percentile(arr, 50)),
                    "p99": float(np.percentile(arr, 99)), "mean": float(arr.mean()),
                    "max": float(arr.max())}  # fmt: skip

        return {
            "config": {"ttft_ms": self.ttft_ns / 1e6, "itl_ms": self.itl_ns / 1e6},
            "requests": len(self.streams_done),
            "tokens": int(sum(s.tokens for s in self.streams_done)),
            "ttft_ms": stats(ttft),
            "itl_ms": stats(itl),
            "lateness_ms": stats(late),
            **(
                {"streams": [[s.key, s.arrival_ns, s.sent_ns] for s in self.streams_done]}
                if per_stream
                else {}
            ),
        }


async def serve(
    port: int, ttft_ms: float, itl_ms: float, out: Path | None, token_text: str = " to",
    per_stream: bool = False,
) -> None:  # fmt: skip
    server = TruthServer(ttft_ms, itl_ms, token_text=token_text)
    loop = asyncio.get_running_loop()
    tcp = await loop.create_server(lambda: _Conn(server), "127.0.0.1", port, backlog=4096)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, server.stop.set)
    scheduler = asyncio.create_task(server.scheduler())
    print(f"truth server on http://127.0.0.1:{port} ttft={ttft_ms} ms itl={itl_ms} ms", flush=True)
    await server.stop.wait()
    scheduler.cancel()
    tcp.close()
    if out is not None:
        out.write_text(
            json.dumps(server.truth(per_stream), indent=None if per_stream else 2) + "\n"
        )


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


@contextlib.contextmanager
def spawned(
    port: int, out: Path, args: Sequence[str] = (), prefix: Sequence[str] = ()
) -> Iterator[str]:
    """This server in a process of its own on 127.0.0.1:``port`` (``args``: its options beyond
    --port and --out; ``prefix``: what runs it, e.g. taskset), for a benchmark's client: yields
    its URL once /health answers, then asks it to shut down, which writes the truth to ``out``.
    """
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [*prefix, sys.executable, str(Path(__file__).resolve()), "--port", str(port), "--out",
         str(out), *args],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not _healthy(url):
            if server.poll() is not None:
                raise SystemExit(f"the truth server exited ({server.returncode})")
            if time.monotonic() > deadline:
                raise SystemExit("the truth server did not answer /health within 30 s")
            time.sleep(0.1)
        yield url
    finally:
        try:
            httpx.post(url + "/shutdown", timeout=5)
        except httpx.HTTPError:
            server.terminate()
        server.wait(timeout=300)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--out", type=Path, default=None, help="where to write the truth (JSON)")
    parser.add_argument("--token-text", default=" to", help="each chunk's text (one token)")
    parser.add_argument(
        "--per-stream", action="store_true", help="also write every stream's send times"
    )
    args = parser.parse_args()
    asyncio.run(
        serve(args.port, args.ttft_ms, args.itl_ms, args.out, args.token_text, args.per_stream)
    )


if __name__ == "__main__":
    main()
