"""The virtual-time load loop of `bench simulate`: a load plan against an engine, no HTTP.

A discrete-event loop plays a load plan (bench.run.load_plan: closed-loop users with think time and
ramp-up, or open-loop arrivals under a concurrency cap, cut at duration_s) against LLMEngine on
the simulated executor's virtual clock. Requests that become due while a step runs join at the
next step, as they would through the server's inbox (sent_s is still the due time, so TTFT counts
the wait); each step's new tokens become one chunk stamped at the step's end; an idle engine
jumps to the next due time.

Differences from a served run, by construction: no network or client lag (sent_s is the due
time unless an open-loop cap delays it), no detokenization (a chunk per step, never merged with
the next because its text was empty), output tokens counted by the engine (``usage``).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from engine.core.request import SamplingParams
from engine.llm_engine import LLMEngine
from engine.sim.executor import SimExecutor
from loadgen.client.failures import CANCELLED
from loadgen.drivers.driver import LoadPlan
from loadgen.drivers.sending import RecordCallback
from loadgen.request_spec import RequestSpec, message_text
from results.folder.records import ChunkRecord, RequestRecord
from results.schema.api_kinds import CHAT_APIS


@dataclass
class _Flight:
    """A request in the engine, and who sent it (closed loop: session index and turn)."""

    record: RequestRecord
    order: int
    user: int
    session: int = -1
    turn: int = 0


@dataclass
class _Loop:
    """The event loop's state: due sends, requests in flight, and, without ``on_record``,
    the final records by plan order (with it, the loop keeps none: a long simulation's memory
    does not grow with its requests)."""

    engine: LLMEngine
    plan: LoadPlan
    records: dict[int, RequestRecord] = field(default_factory=dict)
    flights: dict[str, _Flight] = field(default_factory=dict)
    events: list[tuple[float, int, int, int, int]] = field(default_factory=list)
    waiting: deque[int] = field(default_factory=deque)  # open loop: due, held by the cap
    next_session: int = 0
    counter: int = 0
    # Called with each record once it is final (done, refused or cancelled).
    on_record: RecordCallback | None = None

    def final(self, record: RequestRecord, order: int) -> None:
        """``record`` (plan position ``order``) is done, refused or cancelled."""
        if self.on_record is not None:
            self.on_record(record)
        else:
            self.records[order] = record

    @property
    def now_s(self) -> float:
        return self.engine.clock_ns() / 1e9

    def due(self, t_s: float, user: int, session: int, turn: int) -> None:
        """Queue a send at ``t_s``: closed loop (user, session, turn); open loop (-1, index, 0)."""
        self.counter += 1
        heapq.heappush(self.events, (t_s, self.counter, user, session, turn))


def _order(plan: LoadPlan) -> np.ndarray:
    """Each session's first plan position (sessions flattened): session i's turn t is request
    ``offsets[i] + t``. One int64 a session, where a dict of (session, turn) keys would cost
    a few hundred bytes a request."""
    lengths = np.fromiter((len(s) for s in plan.sessions), np.int64, len(plan.sessions))
    return np.concatenate(([0], np.cumsum(lengths)[:-1])) if len(lengths) else lengths


def _prompt_ids(engine: LLMEngine, spec: RequestSpec) -> list[int]:
    """The prompt's token ids as the server would make them (chat template for chat)."""
    tok = engine.tokenizer
    if spec.api in CHAT_APIS:  # chat, responses, messages: the chat template
        turns = spec.messages or (("user", spec.prompt),)
        chat = [dict(zip(("role", "content"), message_text(m), strict=True)) for m in turns]
        text = tok.apply_chat_template(chat)
        return tok.encode(text, add_special_tokens=False)
    return tok.encode(spec.prompt, add_special_tokens=True)


def _send(
    loop: _Loop, spec: RequestSpec, order: int, user: int, scheduled_s: float, sent_s: float,
    **who: int,
) -> None:  # fmt: skip
    """The client sends at ``sent_s`` (at most a step ago); the engine takes it in now."""
    now = loop.now_s
    ids = _prompt_ids(loop.engine, spec)
    record = RequestRecord(
        spec.request_id, user, scheduled_s, sent_s, None, None, len(ids), 0, "engine", "ok", None,
        200,
    )  # fmt: skip
    params = SamplingParams(
        max_tokens=spec.max_tokens,
        temperature=spec.temperature,
        seed=spec.seed,
        ignore_eos=spec.ignore_eos,
    )
    try:
        loop.engine.add_request(spec.request_id, ids, params)
    except ValueError as e:  # what the server answers with a 400
        record.status, record.error, record.http_status, record.done_s = "error", str(e), 400, now
        _finished(loop, _Flight(record, order, user, **who))
        return
    loop.flights[spec.request_id] = _Flight(record, order, user, **who)


def _finished(loop: _Loop, flight: _Flight) -> None:
    """A request ended at ``done_s``: its user's next send (closed), or a freed slot (open)."""
    plan = loop.plan
    loop.final(flight.record, flight.order)
    done = flight.record.done_s if flight.record.done_s is not None else loop.now_s
    if plan.mode == "open":
        if loop.waiting:  # the longest-waiting request takes the freed slot, now
            i = loop.waiting.popleft()
            assert plan.schedule_s is not None
            _send(loop, plan.sessions[i][0], i, i, float(plan.schedule_s[i]), done)
        return
    nxt = flight.turn + 1
    if nxt < len(plan.sessions[flight.session]):
        loop.due(done + plan.think_time_s, flight.user, flight.session, nxt)
    else:
        loop.due(done + plan.think_time_s, flight.user, -1, 0)


def _fire(loop: _Loop, orders: np.ndarray) -> None:
    """Send every request due by now."""
    plan = loop.plan
    while loop.events and loop.events[0][0] <= loop.now_s:
        t_s, _, user, session, turn = heapq.heappop(loop.events)
        if plan.mode == "open":
            if len(loop.flights) >= plan.cap or loop.waiting:
                loop.waiting.append(session)
            else:
                _send(loop, plan.sessions[session][0], session, session, t_s, t_s)
            continue
        if session < 0:  # the user takes the next session
            session, turn = loop.next_session, 0
            if session >= len(plan.sessions):
                continue
            loop.next_session += 1
        spec = plan.sessions[session][turn]
        order = int(orders[session]) + turn
        _send(loop, spec, order, user, t_s, t_s, session=session, turn=turn)


def _cancelled(spec: RequestSpec, user: int, due_s: float) -> RequestRecord:
    """A request the run's end caught before it was answered (as the load generator records)."""
    return RequestRecord(spec.request_id, user, due_s, due_s, None, None, spec.prompt_tokens, 0,
                         "chunks", "cancelled", CANCELLED, None)  # fmt: skip


def _cut(loop: _Loop, end_s: float, orders: np.ndarray) -> None:
    """The duration ended during a step: what was in flight, waiting for the open loop's cap,
    or due before the end is cancelled (a client would have sent those); nothing else is sent."""
    plan = loop.plan
    for rid, flight in list(loop.flights.items()):
        loop.engine.abort_request(rid)
        record = flight.record
        record.status, record.error, record.done_s = "cancelled", CANCELLED, end_s
        loop.final(record, flight.order)
    loop.flights.clear()
    held = [(float(plan.schedule_s[i]), -1, i, 0) for i in loop.waiting]  # type: ignore[index]
    due = []
    while loop.events and loop.events[0][0] <= end_s:
        t_s, _, user, session, turn = heapq.heappop(loop.events)
        due.append((t_s, user, session, turn))
    for t_s, user, session, turn in held + due:
        if plan.mode == "open":
            loop.final(_cancelled(plan.sessions[session][0], session, t_s), session)
            continue
        if session < 0:
            session, turn = loop.next_session, 0
            if session >= len(plan.sessions):
                continue
            loop.next_session += 1
        order = int(orders[session]) + turn
        loop.final(_cancelled(plan.sessions[session][turn], user, t_s), order)
    loop.events.clear()


def run_plan_virtual(
    engine: LLMEngine,
    plan: LoadPlan,
    on_record: RecordCallback | None = None,
) -> list[RequestRecord]:
    """Play ``plan`` against ``engine`` (virtual clock) to its end; the records in plan order,
    or, with ``on_record`` (a record stream), none: it is called with each record as it
    becomes final, and the loop keeps no record once it is."""
    loop = _Loop(engine, plan, on_record=on_record)
    orders = _order(plan)
    if plan.mode == "open":
        assert plan.schedule_s is not None
        for i, t in enumerate(plan.schedule_s):
            loop.due(float(t), -1, i, 0)
    else:
        for u in range(plan.users):
            loop.due(plan.ramp_up_s * u / plan.users, u, -1, 0)
    end_s = plan.duration_s
    executor = engine.executor
    if not isinstance(executor, SimExecutor):
        raise TypeError("the virtual-time loop needs an engine on the simulated device (sim)")
    clock = executor.clock
    while True:
        _fire(loop, orders)
        if engine.has_unfinished_requests():
            outputs = engine.step()
            now = loop.now_s
            if end_s is not None and now > end_s:
                _cut(loop, end_s, orders)
                break
            for out in outputs:
                flight = loop.flights.get(out.request_id)
                if flight is None or not out.new_token_ids:
                    continue
                rec = flight.record
                rec.chunks.append(
                    ChunkRecord(rec.request_id, len(rec.chunks), now, len(out.new_token_ids))
                )
                rec.first_token_s = rec.first_token_s if rec.first_token_s is not None else now
                rec.first_answer_token_s = rec.first_token_s  # the simulated engine does not reason
                rec.output_tokens = out.num_output_tokens
                if out.finished:
                    rec.done_s = now
                    del loop.flights[out.request_id]
                    _finished(loop, flight)
        elif loop.events:
            # Up to the next whole nanosecond, so that the event is due once the clock is there.
            clock.advance_to(math.ceil(loop.events[0][0] * 1e9))
            if end_s is not None and loop.now_s > end_s:
                break
        else:
            break
    return [loop.records[i] for i in sorted(loop.records)]
