"""The async front of the engine: results to asyncio, one wake-up per step.

Two ways to run the engine behind it. AsyncLLM steps an LLMEngine in a background thread of the
server's process (tests, notebooks). RemoteAsyncLLM talks to an engine core in its own process
(engine/serving/core_process.py, what `bench serve` runs), so the step loop never waits on the
server's GIL. Either way the server's coroutines submit requests and read their outputs from
per-request asyncio queues, and a whole step's outputs reach the event loop in one
call_soon_threadsafe, so cross-thread wake-ups cost one per step, not one per token.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from typing import Any

from engine.core.request import SamplingParams
from engine.llm_engine import LLMEngine, RequestOutput
from engine.serving.core_messages import (
    AbortRequest,
    AddRequest,
    Call,
    CallResult,
    CoreDied,
    CoreEvent,
    Embed,
    Idle,
    Query,
    Rejected,
    StepOutputs,
    unexpected,
)
from engine.serving.core_process import EngineCoreError, EngineCoreProcess, answer
from engine.serving.metrics import EngineMetrics

log = logging.getLogger(__name__)


class EngineDeadError(RuntimeError):
    """The step loop raised; every in-flight request fails with this error."""


class AsyncLLM:
    def __init__(self, engine: LLMEngine, metrics: EngineMetrics | None = None) -> None:
        self.engine = engine
        self.metrics = metrics
        self._inbox: deque[AddRequest | AbortRequest] = deque()
        self._wake = threading.Event()
        # Held by a step and by an embedding (core_messages.Embed): the model runs one at a time.
        self._model_lock = threading.Lock()
        self._stopping = False
        self._queues: dict[str, asyncio.Queue[RequestOutput | BaseException]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.dead: BaseException | None = None
        # Called on the event loop once the engine has died and every waiter has its error.
        self.on_dead: Callable[[BaseException], None] | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread = threading.Thread(target=self._run, name="engine-step-loop", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    async def generate(
        self, request_id: str, prompt_token_ids: list[int], params: SamplingParams
    ) -> AsyncIterator[RequestOutput]:
        """Yield the request's outputs until it finishes; abort it if the consumer leaves."""
        if self.dead is not None:
            raise EngineDeadError(f"the engine's step loop failed: {self.dead!r}")
        self.engine.check_request(len(prompt_token_ids), params)
        queue: asyncio.Queue[RequestOutput | BaseException] = asyncio.Queue()
        self._queues[request_id] = queue
        self._submit(AddRequest(request_id, prompt_token_ids, params))
        finished = False
        try:
            while True:
                item = await queue.get()
                if isinstance(item, ValueError):
                    raise item
                if isinstance(item, BaseException):
                    raise EngineDeadError(f"the engine's step loop failed: {item!r}") from item
                yield item
                if item.finished:
                    finished = True
                    return
        finally:
            self._queues.pop(request_id, None)
            if not finished:
                self.abort(request_id)

    def abort(self, request_id: str) -> None:
        self._submit(AbortRequest(request_id))

    def _submit(self, msg: AddRequest | AbortRequest) -> None:
        self._inbox.append(msg)
        self._wake.set()

    async def call(self, query: Query) -> Any:
        """The engine's answer to ``query`` (a core_messages.Query; JSON-safe); an Embed runs
        the model, off the event loop and never beside a step."""
        if isinstance(query, Embed):
            return await asyncio.to_thread(self._answer_locked, query)
        return answer(self.engine, query)

    def _answer_locked(self, query: Query) -> Any:
        with self._model_lock:
            return answer(self.engine, query)

    def _drain_inbox(self) -> None:
        while self._inbox:
            match msg := self._inbox.popleft():
                case AddRequest(request_id=rid, prompt_token_ids=prompt, params=params):
                    try:
                        self.engine.add_request(rid, prompt, params)
                    except ValueError as e:
                        self._post([e], [rid])
                case AbortRequest(request_id=rid):
                    self.engine.abort_request(rid)
                case _:
                    raise TypeError(unexpected(msg, AddRequest | AbortRequest))

    def _run(self) -> None:
        engine = self.engine
        try:
            while not self._stopping:
                self._drain_inbox()
                if not engine.has_unfinished_requests():
                    # Aborts can empty the engine without a step: publish the idle state.
                    if self.metrics is not None:
                        self.metrics.record_idle(engine.block_pool.usage)
                    self._wake.wait(timeout=1.0)
                    self._wake.clear()
                    continue
                with self._model_lock:
                    outputs = engine.step()
                stats = engine.last_stats
                if self.metrics is not None and stats is not None:
                    self.metrics.record_step(stats)
                if outputs:
                    self._post(outputs)
        except BaseException as e:  # the loop must report any failure, then stop
            log.exception("engine step loop failed")
            self.dead = e
            if self._loop is not None and not self._loop.is_closed():
                self._loop.call_soon_threadsafe(self._fail_all, e)

    def _post(self, items: list, request_ids: list[str] | None = None) -> None:
        if self._loop is None or self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._dispatch, items, request_ids)

    def _dispatch(self, items: list, request_ids: list[str] | None) -> None:
        ids = request_ids or [o.request_id for o in items]
        for rid, item in zip(ids, items, strict=True):
            queue = self._queues.get(rid)
            if queue is not None:
                queue.put_nowait(item)

    def _fail_all(self, error: BaseException) -> None:
        for queue in self._queues.values():
            queue.put_nowait(error)
        if self.on_dead is not None:
            self.on_dead(error)


class RemoteAsyncLLM(AsyncLLM):
    """AsyncLLM over an engine core process: requests go down its pipe from the event loop's
    thread, and a reader thread hands each step's outputs to the loop."""

    def __init__(self, core: EngineCoreProcess, metrics: EngineMetrics | None = None) -> None:
        super().__init__(core, metrics)  # type: ignore[arg-type]
        self.core = core
        self._calls: dict[int, Future[Any]] = {}
        self._call_ids = itertools.count()

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread = threading.Thread(target=self._read, name="engine-core-reader", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        self._stopping = True
        self.core.close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _submit(self, msg: AddRequest | AbortRequest) -> None:
        if self.dead is not None:
            return
        self.core.send(msg)

    async def call(self, query: Query) -> Any:
        if self.dead is not None:
            raise EngineDeadError(f"the engine core died: {self.dead}")
        call_id = next(self._call_ids)
        future: Future[Any] = Future()
        self._calls[call_id] = future
        self.core.send(Call(call_id, query))
        return await asyncio.wrap_future(future)

    def _read(self) -> None:
        conn = self.core.conn
        try:
            while True:
                msg: CoreEvent = conn.recv()
                match msg:
                    case StepOutputs():
                        if self.metrics is not None:
                            self.metrics.record_step(msg.stats)
                        if msg.rows:  # a step of prefill chunks alone wakes no one
                            self._post(msg.outputs())
                    case Idle(kv_cache_usage=usage):
                        if self.metrics is not None:
                            self.metrics.record_idle(usage)
                    case Rejected(request_id=rid, message=message):
                        self._post([ValueError(message)], [rid])
                    case CallResult(call_id=call_id, value=value):
                        future = self._calls.pop(call_id, None)
                        if future is not None:
                            future.set_result(value)
                    case CoreDied(reason=reason):
                        raise EngineCoreError(reason)
                    case _:
                        raise EngineCoreError(unexpected(msg, CoreEvent))
        except (EOFError, OSError, EngineCoreError) as e:
            if self._stopping:
                return
            error = e if isinstance(e, EngineCoreError) else EngineCoreError(
                f"the engine core exited (exit code {self.core.process.exitcode})"
            )  # fmt: skip
            log.error("engine core failed: %s", error)
            self.dead = error
            for future in self._calls.values():
                future.set_exception(EngineDeadError(str(error)))
            if self._loop is not None and not self._loop.is_closed():
                self._loop.call_soon_threadsafe(self._fail_all, error)
