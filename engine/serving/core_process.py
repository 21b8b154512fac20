"""The engine core in its own process, as vLLM's V1 runs it: the server never shares a GIL
with the step loop.

In one process the step thread and the HTTP event loop take turns on the GIL: every torch op
releases it and must win it back from the event loop, which holds it for up to the switch
interval (5 ms) while it encodes and writes SSE events. At 100 streams that contention doubled
the step time. Here a child process owns the LLMEngine and steps it without pause; the server
process keeps the tokenizer, the HTTP front and the metrics.

The two speak the typed messages of engine.serving.core_messages over one multiprocessing
Pipe: requests and queries down, one StepOutputs per step up.
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
from engine.llm_engine import LLMEngine, check_request_fits
from engine.llm_engine import load_tokenizer as _load_tokenizer
from engine.model.weights import load_model_spec
from engine.native.cpu_allocator import retain_freed_memory
from engine.serving.core_messages import (
    AbortRequest,
    AddRequest,
    Call,
    CallResult,
    CoreDied,
    CoreStartup,
    Describe,
    Embed,
    Idle,
    Query,
    Ready,
    Rejected,
    ResetPrefixCache,
    Shutdown,
    StartupFailed,
    StepOutputs,
    StepsSince,
    ToCore,
    unexpected,
)
from engine.serving.process_title import CORE_TITLE, set_process_title
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
    """The child's entry point: build the engine, report Ready (or StartupFailed), then
    serve the pipe."""
    set_process_title(CORE_TITLE)
    # This process exists to run the model (engine/native/cpu_allocator.py).
    why = retain_freed_memory()
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
        conn.send(StartupFailed(f"{type(e).__name__}: {e}"))
        return
    conn.send(Ready(engine.max_model_len, engine.max_tokens_capacity, engine.served_model_name))
    serve(engine, conn)


def serve(engine: LLMEngine, conn: Connection) -> None:
    """Step ``engine`` and answer the pipe until Shutdown or the server goes away. Any
    failure, a message that is not ToCore's included, is sent as CoreDied and ends serving."""
    try:
        _serve(engine, conn)
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        return  # the server went away
    except BaseException as e:
        with contextlib.suppress(OSError, ValueError):
            conn.send(CoreDied(repr(e)))


def _serve(engine: LLMEngine, conn: Connection) -> None:
    last_idle_report = 0.0
    while True:
        busy = engine.has_unfinished_requests()
        # Take everything that arrived since the last step; block only when there is no work.
        while conn.poll(0 if busy else _IDLE_REPORT_S):
            msg: ToCore = conn.recv()
            match msg:
                case AddRequest(request_id=rid, prompt_token_ids=prompt, params=params):
                    try:
                        engine.add_request(rid, prompt, params)
                    except ValueError as e:
                        conn.send(Rejected(rid, str(e)))
                case AbortRequest(request_id=rid):
                    engine.abort_request(rid)
                case Call(call_id=call_id, query=query):
                    conn.send(CallResult(call_id, answer(engine, query)))
                case Shutdown():
                    return
                case _:
                    raise TypeError(unexpected(msg, ToCore))
            busy = engine.has_unfinished_requests()
        if not busy:
            now = time.monotonic()
            if now - last_idle_report >= _IDLE_REPORT_S:
                conn.send(Idle(engine.block_pool.usage))
                last_idle_report = now
            continue
        outputs = engine.step()
        stats = engine.last_stats
        assert stats is not None, "LLMEngine.step() sets last_stats"
        conn.send(StepOutputs.of(outputs, stats))


def answer(engine: LLMEngine, query: Query) -> Any:
    """The engine's answer to a query (JSON-safe), for either front. Only ResetPrefixCache
    changes the engine, and only when no request runs, so a query never races a step."""
    match query:
        case Describe():
            return engine.describe()
        case ResetPrefixCache():
            return engine.reset_prefix_cache()
        case StepsSince(since=since):
            return engine.steps.since(since)
        case Embed(prompts=prompts):
            # A refusal is an answer, not a failure of the core.
            try:
                return {"embeddings": engine.embed(prompts)}
            except ValueError as e:
                return {"error": str(e)}
        case _:
            raise TypeError(unexpected(query, Query))


class EngineCoreProcess:
    """The server's handle on an engine core in a child process: its limits, its tokenizer
    (loaded here too, for the HTTP front), and the pipe. One thread may send (the event loop),
    one may receive (AsyncLLM's reader)."""

    def __init__(self, config: EngineConfig, start_timeout_s: float = 600.0) -> None:
        self.config = config
        model_config, _ = load_model_spec(config.model.model, config.model.device == "sim")
        self.model_config = model_config
        self.tokenizer: Tokenizer = _load_tokenizer(config.model.model, model_config)
        # spawn, not fork: the parent has torch (and its OpenMP pool) loaded already.
        ctx = multiprocessing.get_context("spawn")
        self.conn, child_conn = ctx.Pipe()
        self.process = ctx.Process(
            target=core_main, args=(config, child_conn), name="engine-core", daemon=True
        )
        self.process.start()
        child_conn.close()
        ready = self._wait_ready(start_timeout_s)
        self.max_model_len = ready.max_model_len
        self.max_tokens_capacity = ready.kv_capacity_tokens
        self.served_model_name = ready.served_model_name

    def _wait_ready(self, timeout_s: float) -> Ready:
        if not self.conn.poll(timeout_s):
            self.close()
            raise EngineCoreError(f"the engine core did not start within {timeout_s:.0f} s")
        try:
            msg: CoreStartup = self.conn.recv()
        except EOFError:
            self.process.join(timeout=5)
            raise EngineCoreError(
                f"the engine core exited during start (exit code {self.process.exitcode})"
            ) from None
        match msg:
            case Ready():
                return msg
            case StartupFailed(reason=reason):
                self.close()
                raise EngineCoreError(reason)
            case _:
                self.close()
                raise EngineCoreError(unexpected(msg, CoreStartup))

    def check_request(self, num_prompt_tokens: int, params: SamplingParams) -> None:
        """As LLMEngine.check_request, from the limits the core reported."""
        check_request_fits(num_prompt_tokens, params, self.max_model_len, self.max_tokens_capacity)

    def send(self, msg: ToCore) -> None:
        self.conn.send(msg)

    def close(self) -> None:
        """Ask the core to stop, then make sure it has."""
        if self.process.is_alive():
            with contextlib.suppress(OSError, ValueError):
                self.conn.send(Shutdown())
            self.process.join(timeout=10)
            if self.process.is_alive():
                self.process.terminate()
                self.process.join(timeout=5)
        self.conn.close()
