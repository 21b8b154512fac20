"""The engine core in its own process, as vLLM's V1 runs it: the server never shares a GIL
with the step loop.

In one process the step thread and the HTTP event loop take turns on the GIL: every torch op
releases it and must win it back from the event loop, which holds it for up to the switch
interval (5 ms) while it encodes and writes SSE events. At 100 streams that contention doubled
the step time. Here a child process owns the LLMEngine and steps it without pause; the server
process keeps the tokenizer, the HTTP front and the metrics.

Wire protocol, one multiprocessing Pipe (pickled tuples):
  server -> core: ("add", request_id, prompt_token_ids, SamplingParams), ("abort", request_id),
                  ("call", call_id, method, args) for describe / steps_since, ("shutdown",)
  core -> server: ("ready", limits), ("step", outputs, StepStats), ("idle", kv_cache_usage),
                  ("rejected", request_id, message), ("result", call_id, value),
                  ("dead", message)
A step's outputs travel as plain tuples in RequestOutput's field order: one message per step,
so the server wakes once per step, not once per token.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import time
from dataclasses import replace
from multiprocessing.connection import Connection
from typing import Any

from engine.config import EngineConfig
from engine.core.request import SamplingParams
from engine.llm_engine import LLMEngine, check_request_fits, load_model_spec
from engine.llm_engine import load_tokenizer as _load_tokenizer
from engine.native.cpu_allocator import retain_freed_memory
from engine.tokenizer.tokenizer import Tokenizer

log = logging.getLogger(__name__)

# How often an idle core reports its KV usage (seconds): /metrics stays current when idle.
_IDLE_REPORT_S = 1.0


class EngineCoreError(RuntimeError):
    """The core process could not start, or died; the message says why."""


def default_core_threads() -> int:
    """torch threads for a core whose config leaves num_threads unset: every core this process
    may use but one, which the HTTP front needs (and, on a benchmark box, the load generator).
    An OpenMP team on oversubscribed cores waits at each op's barrier for a descheduled
    thread: on 2 cores, 2 threads gave 4,423 tok/s at 100 users where 1 gave 5,005. Burst
    steps (mostly prefill, engine.BURST_PREFILL_RATIO) take every core."""
    return max(1, len(os.sched_getaffinity(0)) - 1)


def core_main(config: EngineConfig, conn: Connection) -> None:
    """The child's entry point: build the engine, report its limits, then serve the pipe."""
    why = (
        retain_freed_memory()
    )  # this process exists to run the model (engine/native/cpu_allocator.py)
    if why is not None:
        log.info("malloc settings left as they were: %s", why)
    parallel = config.parallel
    if parallel.num_threads is None:
        parallel = replace(parallel, num_threads=default_core_threads())
        if parallel.prefill_num_threads is None:
            parallel = replace(parallel, prefill_num_threads=len(os.sched_getaffinity(0)))
        config = replace(config, parallel=parallel)
    try:
        engine = LLMEngine(config)
    except BaseException as e:
        conn.send(("dead", f"{type(e).__name__}: {e}"))
        return
    conn.send(
        (
            "ready",
            {
                "max_model_len": engine.max_model_len,
                "kv_capacity_tokens": engine.max_tokens_capacity,
                "served_model_name": engine.served_model_name,
            },
        )
    )
    try:
        _serve(engine, conn)
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        return  # the server went away
    except BaseException as e:
        with contextlib.suppress(OSError, ValueError):
            conn.send(("dead", repr(e)))


def _serve(engine: LLMEngine, conn: Connection) -> None:
    last_idle_report = 0.0
    while True:
        busy = engine.has_unfinished_requests()
        # Take everything that arrived since the last step; block only when there is no work.
        while conn.poll(0 if busy else _IDLE_REPORT_S):
            msg = conn.recv()
            op = msg[0]
            if op == "add":
                try:
                    engine.add_request(msg[1], msg[2], msg[3])
                except ValueError as e:
                    conn.send(("rejected", msg[1], str(e)))
            elif op == "abort":
                engine.abort_request(msg[1])
            elif op == "call":
                conn.send(("result", msg[1], engine_call(engine, msg[2], msg[3])))
            elif op == "shutdown":
                return
            busy = engine.has_unfinished_requests()
        if not busy:
            now = time.monotonic()
            if now - last_idle_report >= _IDLE_REPORT_S:
                conn.send(("idle", engine.block_pool.usage))
                last_idle_report = now
            continue
        outputs = engine.step()
        # Flat tuples, built by hand: dataclasses.astuple deep-copies every field (5% of the
        # core's time at 100 streams).
        rows = [
            (o.request_id, o.new_token_ids, o.num_prompt_tokens, o.num_output_tokens,
             o.finished, o.finish_reason)
            for o in outputs
        ]  # fmt: skip
        conn.send(("step", rows, engine.last_stats))


def engine_call(engine: LLMEngine, method: str, args: tuple[Any, ...]) -> Any:
    """The engine's read-only calls the server makes: describe() and steps_since(n)."""
    if method == "describe":
        return engine.describe()
    if method == "steps_since":
        return engine.steps.since(*args)
    raise ValueError(f"unknown engine core call {method!r}")


class EngineCoreProcess:
    """The server's handle on an engine core in a child process: its limits, its tokenizer
    (loaded here too, for the HTTP front), and the pipe. One thread may send (the event loop),
    one may receive (AsyncLLM's reader)."""

    def __init__(self, config: EngineConfig, start_timeout_s: float = 600.0) -> None:
        self.config = config
        model_config, _ = load_model_spec(config.model.model, config.model.device == "sim")
        self.tokenizer: Tokenizer = _load_tokenizer(config.model.model, model_config)
        # spawn, not fork: the parent has torch (and its OpenMP pool) loaded already.
        ctx = multiprocessing.get_context("spawn")
        self.conn, child_conn = ctx.Pipe()
        self.process = ctx.Process(
            target=core_main, args=(config, child_conn), name="engine-core", daemon=True
        )
        self.process.start()
        child_conn.close()
        limits = self._wait_ready(start_timeout_s)
        self.max_model_len: int = limits["max_model_len"]
        self.max_tokens_capacity: int = limits["kv_capacity_tokens"]
        self.served_model_name: str = limits["served_model_name"]

    def _wait_ready(self, timeout_s: float) -> dict[str, Any]:
        if not self.conn.poll(timeout_s):
            self.close()
            raise EngineCoreError(f"the engine core did not start within {timeout_s:.0f} s")
        try:
            msg = self.conn.recv()
        except EOFError:
            self.process.join(timeout=5)
            raise EngineCoreError(
                f"the engine core exited during start (exit code {self.process.exitcode})"
            ) from None
        if msg[0] != "ready":
            self.close()
            raise EngineCoreError(str(msg[1]))
        return msg[1]

    def check_request(self, num_prompt_tokens: int, params: SamplingParams) -> None:
        """As LLMEngine.check_request, from the limits the core reported."""
        check_request_fits(num_prompt_tokens, params, self.max_model_len, self.max_tokens_capacity)

    def send(self, msg: tuple[Any, ...]) -> None:
        self.conn.send(msg)

    def close(self) -> None:
        """Ask the core to stop, then make sure it has."""
        if self.process.is_alive():
            with contextlib.suppress(OSError, ValueError):
                self.conn.send(("shutdown",))
            self.process.join(timeout=10)
            if self.process.is_alive():
                self.process.terminate()
                self.process.join(timeout=5)
        self.conn.close()
