"""The client's per-token CPU on its hot path: SSE parsing and stream accumulation, per read.

    python benchmarks/sse_parse_cost.py [--rev REV] [--tokens 256] [--streams 400]

Feeds a vLLM-shaped chat stream (a role chunk, ``--tokens`` one-token content chunks, a finish
chunk, usage, ``[DONE]``; one event per network read, as engines send them) through
``SSEParser.feed`` and ``StreamAccumulator.add_event``, ``--streams`` times, and prints the best
and median nanoseconds per content token. With ``--rev``, the same two modules as they were at
that git revision are measured too, interleaved with this tree's (the two share everything
else), so a change to the hot path shows its cost on the same loaded machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadgen.client.readers.openai_stream import StreamAccumulator  # noqa: E402
from loadgen.client.readers.sse import SSEParser  # noqa: E402

_HEAD = {"id": "chatcmpl-0123456789abcdef", "object": "chat.completion.chunk",
         "created": 1795942390, "model": "tiny-llama"}  # fmt: skip


def _event(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps({**_HEAD, **obj}, separators=(",", ":")).encode() + b"\n\n"


def stream_reads(tokens: int) -> list[bytes]:
    """The reads of one stream, one event each."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return _event({"choices": [choice]})

    words = [" the", " cat", "s", " sat", ",", " on", " mat", "."]
    usage = {"prompt_tokens": 12, "completion_tokens": tokens, "total_tokens": 12 + tokens}
    return [
        chunk({"role": "assistant", "content": ""}),
        *(chunk({"content": words[i % len(words)]}) for i in range(tokens)),
        chunk({}, "length"),
        _event({"choices": [], "usage": usage}),
        b"data: [DONE]\n\n",
    ]


def _load(name: str, source: str, folder: Path) -> Any:
    path = folder / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _at_rev(rev: str, folder: Path) -> tuple[Any, Any]:
    """(SSEParser, a StreamAccumulator factory) as at git revision ``rev``."""

    def show(name: str) -> str:
        # The readers moved into loadgen/client/readers/; an older revision has them one up.
        for path in (f"loadgen/client/readers/{name}", f"loadgen/client/{name}"):
            shown = subprocess.run(
                ["git", "-C", str(ROOT), "show", f"{rev}:{path}"], capture_output=True, text=True
            )
            if shown.returncode == 0:
                return shown.stdout
        raise SystemExit(f"--rev {rev}: no {name} in loadgen/client/ at that revision")

    # An older revision's modules import the readers by their old names.
    for name in ("sse", "openai_stream", "token_counts"):
        old = f"loadgen.client.{name}"
        sys.modules.setdefault(old, importlib.import_module(f"loadgen.client.readers.{name}"))
    sse = _load("sse_at_rev", show("sse.py"), folder)
    stream = _load("openai_stream_at_rev", show("openai_stream.py"), folder)
    return sse.SSEParser, lambda tokens: stream.StreamAccumulator("chat")


def _one(parser_cls: Any, make_acc: Any, reads: list[bytes], tokens: int) -> int:
    parser, acc = parser_cls(), make_acc(tokens)
    start = time.perf_counter_ns()
    for read in reads:
        for data in parser.feed(read):
            if data:
                acc.add_event(data, 0)
    took = time.perf_counter_ns() - start
    assert len(acc.texts) == tokens
    return took


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--rev", help="also measure the two modules as at this git revision")
    args.add_argument("--tokens", type=int, default=256)
    args.add_argument("--streams", type=int, default=400)
    opts = args.parse_args()
    reads = stream_reads(opts.tokens)
    variants = {"this tree": (SSEParser, lambda tokens: StreamAccumulator("chat", tokens))}
    with tempfile.TemporaryDirectory() as folder:
        if opts.rev:
            variants[opts.rev] = _at_rev(opts.rev, Path(folder))
        times: dict[str, list[int]] = {name: [] for name in variants}
        for _ in range(opts.streams // 8):  # warm up
            for parser_cls, make_acc in variants.values():
                _one(parser_cls, make_acc, reads, opts.tokens)
        for _ in range(opts.streams):
            for name, (parser_cls, make_acc) in variants.items():
                times[name].append(_one(parser_cls, make_acc, reads, opts.tokens))
    for name, ns in times.items():
        best, median = min(ns) / opts.tokens, statistics.median(ns) / opts.tokens
        print(f"{name}: best {best:,.0f} ns/token, median {median:,.0f} ns/token")


if __name__ == "__main__":
    main()
