"""An agent-session trace: JSONL, one line per turn, grouped into sessions by ``session_id``.

The shape is AIPerf's multi-turn Mooncake trace (``session_id``, ``timestamp`` and ``delay`` in
milliseconds, ``input_length`` or ``text_input`` or ``messages``, ``output_length``, ``tools``),
with the fields an agent's turn needs beside it. A line's fields:

    session_id      str or int; the lines of a session are its turns, in file order (absent:
                    the line is a session of its own)
    timestamp       ms; when the session starts (read from its first turn), for a replay at
                    the trace's times (the workload's ``time_scale``)
    delay | delay_s the wait before this turn, after the previous turn's answer: ms | seconds
                    (a tool's run time, a user's thinking); ignored on a session's first turn
    messages        the OpenAI messages the turn adds (system, user, ``tool`` results); a line
                    whose messages hold the whole conversation so far (AIPerf's pre-formatted
                    messages) works too: the messages after its last assistant message are the
                    new ones, and that assistant message is the previous turn's answer
    text_input      instead of messages: the user message's text
    input_length    instead of either: a synthetic user message of that many tokens
    output_length   the turn's max_tokens (required, >= 1)
    tools           OpenAI tool definitions sent with the turn (and the session's later turns,
                    until one sets its own)
    tool_results    results for the previous answer's tool calls, each a text or a token count
                    (synthetic text of that length); default: the turn's ``tool`` messages,
                    else synthetic text of the workload's ``tool_result_tokens``
    answer          the assistant message (a text, or an OpenAI message with ``tool_calls``)
                    that joins the history after this turn; default: the next line's recorded
                    one (whole-conversation lines), else synthetic text of ``output_length``

Other fields (``hash_ids``, ``extra``) are ignored. A bad line is refused with its line number
and field.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from loadgen.request_spec import Message
from loadgen.request_tools import ToolError, as_tools
from loadgen.workloads.sessions.plan import PlannedSession, PlannedTurn
from loadgen.workloads.spec import WorkloadError
from perfmodel.files import JSONObject, JSONView

__all__ = ["read_session_trace"]

Synth = Callable[[int], str]  # a text of exactly so many tokens


def _bad(where: str, field: str, problem: str) -> WorkloadError:
    return WorkloadError(f"{where}: field '{field}' {problem}; fix the line")


def _number(line: JSONView, name: str, where: str, integer: bool) -> float | None:
    value = line.get(name)
    if value is None:
        return None
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or value < 0:
        expected = "an integer >= 0" if integer else "a number >= 0"
        raise _bad(where, name, f"expected {expected}, got {value!r}")
    return value


def _messages(line: JSONView, where: str) -> list[Message]:
    raw = line["messages"]
    if (
        not isinstance(raw, list)
        or not raw
        or not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in raw)
    ):
        raise _bad(where, "messages", "expected a non-empty list of {role, content} objects")
    return [m for m in raw]


def _new_messages(line: JSONView, where: str, synth: Synth) -> tuple[list[Message], Message | None]:
    """The messages a line adds, and the previous turn's answer it recorded (or None)."""
    given = [k for k in ("messages", "text_input", "input_length") if line.get(k) is not None]
    if len(given) != 1:
        raise _bad(where, "messages", "or text_input or input_length: set exactly one")
    if given[0] == "text_input":
        if not isinstance(line["text_input"], str):
            raise _bad(where, "text_input", "expected a string")
        return [{"role": "user", "content": line["text_input"]}], None
    if given[0] == "input_length":
        tokens = _number(line, "input_length", where, integer=True)
        if not tokens:
            raise _bad(where, "input_length", "expected an integer >= 1")
        return [{"role": "user", "content": synth(int(tokens))}], None
    messages = _messages(line, where)
    last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=None)
    if last is None:
        return messages, None
    if last == len(messages) - 1:
        raise _bad(where, "messages", "ends with an assistant message: nothing to send")
    return messages[last + 1 :], messages[last]


def _tool_results(line: JSONView, where: str, synth: Synth, default: int) -> tuple[str, ...]:
    raw = line.get("tool_results")
    if raw is None:
        return (synth(default),)
    if not isinstance(raw, list) or not raw:
        raise _bad(where, "tool_results", "expected a non-empty list of texts or token counts")
    out = []
    for item in raw:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, int) and not isinstance(item, bool) and item >= 1:
            out.append(synth(item))
        else:
            raise _bad(
                where, "tool_results", f"expected a text or a token count >= 1, got {item!r}"
            )
    return tuple(out)


def _turn(
    line: JSONView, where: str, synth: Synth, tool_tokens: int
) -> tuple[PlannedTurn, Message | None]:
    """A line's turn (its answer synthetic unless given) and the previous answer it recorded."""
    messages, recorded = _new_messages(line, where, synth)
    out = _number(line, "output_length", where, integer=True)
    if not out:
        raise _bad(where, "output_length", "missing or 0; expected the turn's max_tokens >= 1")
    delay_ms, delay_s = (_number(line, k, where, integer=False) for k in ("delay", "delay_s"))
    if delay_ms is not None and delay_s is not None:
        raise _bad(where, "delay", "and delay_s both set; keep one")
    delay = delay_s if delay_s is not None else (None if delay_ms is None else delay_ms / 1000)
    tools = line.get("tools")
    if tools is not None:
        try:
            tools = as_tools(tools)
        except ToolError as exc:
            raise _bad(
                where, "tools", f"{exc}; expected a list of OpenAI tool definitions"
            ) from exc
    answer = line.get("answer")
    if answer is None:
        answer = {"role": "assistant", "content": synth(int(out))}
    elif isinstance(answer, str):
        answer = {"role": "assistant", "content": answer}
    elif not (isinstance(answer, dict) and answer.get("role") == "assistant"):
        raise _bad(where, "answer", "expected a text or an assistant message")
    turn = PlannedTurn(
        tuple(messages), int(out), answer, delay, tools,
        _tool_results(line, where, synth, tool_tokens),
    )  # fmt: skip
    return turn, recorded


def _lines(path: Path) -> list[tuple[str, JSONObject]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read the session trace ({exc.strerror})") from exc
    out = []
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"{path}:{n}: not JSON ({exc.msg}); one object a line") from exc
        if not isinstance(obj, dict):
            raise WorkloadError(f"{path}:{n}: expected a JSON object, one turn a line")
        out.append((f"{path}:{n}", obj))
    if not out:
        raise WorkloadError(f"{path}: no turn in the session trace")
    return out


def read_session_trace(
    path: str | Path, synth: Synth, tool_result_tokens: int
) -> list[PlannedSession]:
    """The sessions of the trace at ``path`` (module docstring), in the order they start
    (by timestamp where every session has one, else by first appearance); ``synth`` makes the
    synthetic texts (exact token counts)."""
    turns: dict[str, list[PlannedTurn]] = {}
    starts: dict[str, float | None] = {}
    answered: dict[str, bool] = {}  # whether the session's last line gave its own answer
    for n, (where, line) in enumerate(_lines(Path(path))):
        sid = line.get("session_id", f"line-{n}")
        if not isinstance(sid, str | int) or isinstance(sid, bool):
            raise _bad(where, "session_id", f"expected a string or an integer, got {sid!r}")
        sid = str(sid)
        turn, recorded = _turn(line, where, synth, tool_result_tokens)
        session = turns.setdefault(sid, [])
        if not session:
            stamp = _number(line, "timestamp", where, integer=False)
            starts[sid] = None if stamp is None else stamp / 1000
        elif recorded is not None and not answered[sid]:
            session[-1] = replace(session[-1], answer=recorded)
        if session and turn.tools is None:  # an agent sends its tools with every turn
            turn = replace(turn, tools=session[-1].tools)
        session.append(turn)
        answered[sid] = line.get("answer") is not None
    order = list(turns)
    if all(starts[s] is not None for s in order):
        order.sort(key=lambda s: starts[s])  # type: ignore[arg-type, return-value]
        first = starts[order[0]] or 0.0
        starts = {s: (starts[s] or 0.0) - first for s in order}
    return [PlannedSession(s, tuple(turns[s]), starts[s]) for s in order]
