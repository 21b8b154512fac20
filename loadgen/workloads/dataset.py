"""A user's own prompts: the ``dataset`` workload, one request per row of a file of prompts or
chat conversations.

A row is a completions prompt (column ``prompt``, a text) or a chat conversation (column
``messages``, OpenAI's list of ``{"role", "content"}`` messages: every role the chat API takes,
content as a text or a list of text parts, tool calls and tool answers as written). Optional
columns: ``max_tokens`` (the row's output length, tokens) and ``request`` (an object of request
fields sent with that row: ``top_k``, ``response_format``, ...); more fields can be taken from
columns of their own (:attr:`DatasetSource.fields`); ``tools`` (the row's tools, a list in
OpenAI's form or the bare ``{"name", "description", "parameters"}``, loadgen.request_tools; they
win over the scenario's ``[tools]``) and ``tool_choice`` (with them: auto, none, required or a
function's name); ``images`` (the row's images, sent in its last user turn: one image or a
list, each an image URL, the image's bytes or the ``{"bytes", "path"}`` struct of a Hugging
Face ``Image`` column, or a file's path relative to the dataset's folder;
loadgen.request_images; they win over the scenario's ``[images]``).
:attr:`DatasetSource.columns` maps these
names to the file's own column names. The rows come from loadgen.workloads.dataset_files.

What each row sends:

* chat, Responses and Messages (``api = "chat"``, ``"responses"``, ``"messages"``): the
  conversation; a last ``assistant`` message (without tool calls) is the reference answer: it
  is not sent, and its token count is the output length where the row gives none. A prompt row
  sends its prompt as one user message.
* completions: the prompt; a conversation row is refused (it needs the chat API).
* ``max_tokens``: the row's column, else a sample of the scenario's ``[output_len]``, else the
  reference answer's length; capped at ``max_output_tokens``.
* fields: the run's own (``[request]``, ``--extra-body``), then the row's over them.

Rows that cannot be sent so (loadgen.workloads.rows) are refused and counted by reason: no prompt
or user message, an unknown role, content that is not text, no output length, a reserved or
malformed request field, a prompt outside ``min_input_tokens``..``max_input_tokens`` or a
request over the served context (prompt tokens under the run's tokenizer, plus max_tokens).
The rows kept are taken in file order, or shuffled by the seed, and repeated from the start when
the run asks for more requests than there are (said so, with the count); a row reused so is
sent with the output length it was checked with.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np

from loadgen.protocols import TokenizerLike
from loadgen.request_spec import RESERVED_FIELDS, Message, RequestSpec, message_text
from loadgen.request_tools import ToolError, as_tool_choice, as_tools
from loadgen.workloads.dataset_files import read_rows
from loadgen.workloads.rows import RowRefused, RowReport, chat_message, repeat_to, row_images
from loadgen.workloads.spec import LengthDist, ParameterError, WorkloadSpec
from results.schema.api_kinds import CHAT_APIS, Api, api_kind

__all__ = ["COLUMN_NAMES", "DATASET_ORDERS", "DatasetSource", "dataset_requests"]

DatasetOrder = Literal["in-order", "shuffle"]
DATASET_ORDERS: tuple[str, ...] = get_args(DatasetOrder)
# The columns a row is read from, by the name the mapping renames.
COLUMN_NAMES = (
    "prompt", "messages", "max_tokens", "request", "tools", "tool_choice", "images",
)  # fmt: skip


@dataclass(frozen=True)
class DatasetSource:
    """How a dataset's rows are read (the scenario's ``[dataset]`` table): the file's
    ``format`` (loadgen.workloads.dataset_files), a datasets folder's or Hub dataset's ``split``,
    the ``order`` rows are taken in, ``columns`` (one of :data:`COLUMN_NAMES` to the file's
    column), and ``fields``: columns sent, under their own names, as request fields."""

    format: str = "auto"
    split: str = "train"
    order: DatasetOrder = "in-order"
    columns: Mapping[str, str] = field(default_factory=dict)
    fields: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.order not in DATASET_ORDERS:
            raise ParameterError("DatasetSource", "order", f"one of {list(DATASET_ORDERS)}")
        for name in self.columns:
            if name not in COLUMN_NAMES:
                problem = f"maps {name!r}, which is none of {list(COLUMN_NAMES)}"
                raise ParameterError("DatasetSource", "columns", problem)
        if reserved := sorted(set(self.fields) & set(RESERVED_FIELDS)):
            problem = f"{reserved[0]!r} is set by {RESERVED_FIELDS[reserved[0]]}"
            raise ParameterError("DatasetSource", "fields", problem)

    def column(self, name: str) -> str:
        return self.columns.get(name, name)

    def to_dict(self) -> dict[str, Any]:
        """The table as a scenario writes it (run.json's scenario)."""
        return {
            "format": self.format,
            "split": self.split,
            "order": self.order,
            "columns": dict(self.columns),
            "fields": list(self.fields),
        }


@dataclass(frozen=True)
class _Row:
    """One usable row: what to send, its prompt tokens, and its own output length if any."""

    prompt: str
    prompt_tokens: int
    messages: tuple[Message, ...] | None
    max_tokens: int | None
    fields: dict[str, Any]
    tools: tuple[dict[str, Any], ...] = ()
    tool_choice: str | dict[str, Any] | None = None
    images: tuple[str, ...] = ()


def _json_cell(value: Any, what: str) -> Any:
    """A CSV cell holding JSON (a list of messages, an object of fields), parsed."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        raise RowRefused(f"{what} cell that is not JSON") from None


def _conversation(raw: Any) -> tuple[tuple[Message, ...], str | None]:
    """The messages to send and the reference answer's text (a last assistant message)."""
    raw = _json_cell(raw, "messages")
    if not isinstance(raw, list) or not raw:
        raise RowRefused("messages that are not a non-empty list")
    messages = [chat_message(m) for m in raw]
    answer = None
    last = messages[-1]
    if isinstance(last, tuple) and last[0] == "assistant":
        answer = last[1]
        messages.pop()
    if not any(message_text(m)[0] == "user" for m in messages):
        raise RowRefused("no user message")
    return tuple(messages), answer


def _row_fields(row: Mapping[str, Any], source: DatasetSource) -> dict[str, Any]:
    fields = _json_cell(row.get(source.column("request")), "request")
    if fields is None:
        fields = {}
    if not isinstance(fields, Mapping):
        raise RowRefused("request that is not an object of fields")
    fields = {**fields, **{k: row[k] for k in source.fields if row.get(k) is not None}}
    if reserved := sorted(set(fields) & set(RESERVED_FIELDS)):
        raise RowRefused(f"request field {reserved[0]!r} (set by {RESERVED_FIELDS[reserved[0]]})")
    return fields


def _row_tools(
    row: Mapping[str, Any], source: DatasetSource, api: Api
) -> tuple[tuple[dict[str, Any], ...], str | dict[str, Any] | None]:
    """The row's own tools and tool choice (none: empty and None)."""
    raw = row.get(source.column("tools"))
    raw = None if raw == "" else _json_cell(raw, "tools")
    choice = row.get(source.column("tool_choice")) or None  # a name or keyword, as written
    if isinstance(choice, str) and choice.lstrip().startswith("{"):
        choice = _json_cell(choice, "tool_choice")
    if raw is None or raw == []:
        if choice is not None:
            raise RowRefused("tool_choice without tools")
        return (), None
    if api not in CHAT_APIS:
        raise RowRefused(f"tools on the {api} API (set api = 'chat', 'responses' or 'messages')")
    try:
        tools = as_tools(raw)
    except ToolError as exc:
        raise RowRefused(f"tools: {str(exc)[:80]}") from None
    try:
        return tools, as_tool_choice(choice, tools)
    except ToolError:
        raise RowRefused(
            "tool_choice that is none of auto, none, required, a tool's name"
        ) from None


def _max_tokens(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise RowRefused("max_tokens that is not a whole number >= 1")
    return int(value)


def _read_row(
    row: Mapping[str, Any], source: DatasetSource, api: Api, tokenizer: TokenizerLike,
    folder: Path | None = None,
) -> tuple[_Row, int | None]:  # fmt: skip
    """One row to send, and its reference answer's tokens (None without one)."""
    prompt, messages, answer = row.get(source.column("prompt")), None, None
    raw_messages = row.get(source.column("messages"))
    if api_kind(api).conversation and raw_messages is not None:
        messages, answer = _conversation(raw_messages)
        prompt = "\n".join(message_text(m)[1] for m in messages)
    elif raw_messages is not None and prompt is None:
        raise RowRefused("a chat conversation on the completions API (set api = 'chat')")
    if not isinstance(prompt, str) or not prompt.strip():
        raise RowRefused("no prompt")
    tokens = len(tokenizer.encode(prompt, add_special_tokens=False))
    answer_tokens = (
        len(tokenizer.encode(answer, add_special_tokens=False)) if answer is not None else None
    )
    max_tokens = _max_tokens(row.get(source.column("max_tokens")))
    tools, choice = _row_tools(row, source, api)
    fields = _row_fields(row, source)
    images = row_images(row.get(source.column("images")), api, folder)
    row_read = _Row(prompt, tokens, messages, max_tokens, fields, tools, choice, images)
    return row_read, answer_tokens


def _check_lengths(
    row: _Row, workload: WorkloadSpec, max_tokens: int, context_tokens: int | None
) -> None:
    low, high = workload.min_input_tokens, workload.max_input_tokens
    if low is not None and row.prompt_tokens < low:
        raise RowRefused(f"prompt shorter than min_input_tokens ({low})")
    if high is not None and row.prompt_tokens > high:
        raise RowRefused(f"prompt longer than max_input_tokens ({high})")
    if context_tokens is not None and row.prompt_tokens + max_tokens > context_tokens:
        raise RowRefused(f"prompt + max_tokens over the served context ({context_tokens} tokens)")


def dataset_requests(
    workload: WorkloadSpec,
    source: DatasetSource,
    tokenizer: TokenizerLike,
    n: int,
    seed: int,
    api: Api = "completions",
    *,
    output_len: LengthDist | None = None,
    ignore_eos: bool = False,
    temperature: float = 0.0,
    fields: Mapping[str, Any] | None = None,
    context_tokens: int | None = None,
    report: RowReport | None = None,
) -> list[RequestSpec]:
    """``n`` requests from the dataset of ``workload`` (module docstring); ``fields`` are the
    run's request fields, ``context_tokens`` the served context (None: not checked), ``report``
    receives the counts of rows refused and reused.

    Raises:
        WorkloadError: the file does not parse, or no row can be sent.
    """
    where = workload.hub or workload.path
    assert where is not None, "a dataset workload names its path or hub id"
    report = report if report is not None else RowReport(where)
    rows = list(read_rows(where, source.format, source.split, hub=workload.hub is not None))
    # A row's image paths are relative to the file's folder (a datasets folder: itself).
    folder = None if workload.hub else Path(where) if Path(where).is_dir() else Path(where).parent
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xDA7A]))
    if source.order == "shuffle":
        rows = [rows[i] for i in rng.permutation(len(rows)).tolist()]
    samples = _samples(output_len, rng, n)
    # Each row is checked with the output length it is sent with: every row read draws its
    # own sample, and a row reused for want of rows is sent again as it was planned.
    usable: list[tuple[_Row, int]] = []
    for _, row in rows:
        if len(usable) >= n:
            break
        report.read += 1
        sample = next(samples, None)
        try:
            parsed, answer_tokens = _read_row(row, source, api, tokenizer, folder)
            planned = parsed.max_tokens or sample or answer_tokens
            if planned is None:
                raise RowRefused("no output length (a max_tokens column, an answer, output_len)")
            if workload.max_output_tokens is not None:
                planned = min(planned, workload.max_output_tokens)
            _check_lengths(parsed, workload, planned, context_tokens)
        except RowRefused as refused:
            report.refuse(refused.reason)
            continue
        usable.append((parsed, planned))
    report.usable = len(usable)
    chosen = repeat_to(usable, n, report)
    return _specs(chosen, api, ignore_eos, temperature, dict(fields or {}))


def _samples(output_len: LengthDist | None, rng: np.random.Generator, n: int) -> Iterator[int]:
    """Output lengths drawn from ``output_len``, ``n`` at a time (none without it)."""
    while output_len is not None and n > 0:
        yield from output_len.sample(rng, n).tolist()


def _specs(
    chosen: Sequence[tuple[_Row, int]], api: Api, ignore_eos: bool, temperature: float,
    common: dict[str, Any],
) -> list[RequestSpec]:  # fmt: skip
    """One request per chosen row and its planned output length, ids ``req-000000`` on."""
    specs = []
    for i, (row, max_tokens) in enumerate(chosen):
        merged = {**common, **row.fields}
        specs.append(
            RequestSpec(
                request_id=f"req-{i:06d}", prompt=row.prompt, prompt_tokens=row.prompt_tokens,
                max_tokens=max_tokens, api=api, ignore_eos=ignore_eos, temperature=temperature,
                messages=row.messages, fields=merged or None, tools=row.tools,
                tool_choice=row.tool_choice, images=row.images,
            )
        )  # fmt: skip
    return specs
