"""What travels in a Locust run: the master's job, and the messages between master and workers.

`bench run --driver locust` pickles a :class:`LocustJob` into a private temporary folder of the
machine it runs on and starts the master (loadgen.drivers.locust.master) with it; nothing else
reads that file. Workers, on this machine or others, are given nothing but the master's address
(`bench worker --master HOST:PORT`): everything they need reaches them as Locust custom messages
(``runner.send_message``), in the plain msgpack-able "wire" forms below, so the two ends need only
the same version of this code, never a shared file or pickle:

==================  ===============  ============================================================
message             direction        data
==================  ===============  ============================================================
``MSG_PING``        master -> worker ``{"seq", "t0_ns"}``: a clock ping (loadgen.drivers.clock_sync)
``MSG_PONG``        worker -> master ``{"seq", "t0_ns", "t1_ns"}``, answered at once
``MSG_SETUP``       master -> worker ``{"index", "workers", "t0_ns", "client", "think_time_s",
                                     "parts", "mode", "max_concurrency"}``: the worker's index,
                                     the run clock's origin on the *worker's* clock, the client
                                     settings, how many plan parts, closed or open loop and (open)
                                     the most requests this worker has in flight
``MSG_PLAN``        master -> worker ``{"part", "sessions", "due_s"}``: a part of the worker's
                                     sessions; open loop: each one's planned time (s from the
                                     schedule's start), else None
``MSG_START``       master -> worker ``{"start_s"}``: open loop: the schedule starts at this run
                                     second, on the master's clock
``MSG_CLOCK``       master -> worker ``{"t0_ns"}``: the run's origin on the worker's clock, measured
                                     again during the run (drift)
``MSG_READY``       worker -> master ``{"requests"}``: every part arrived
``MSG_RECORDS``     worker -> master ``{"started", "records"}``: requests just sent
                                     (``[request_id, user_id, scheduled_s, sent_s]``) and finished
                                     ones (:func:`record_to_wire`), every 0.25 s
``MSG_CLIENT``      worker -> master the self-check samples' columns
``MSG_DONE``        worker -> master ``{"stamps"}``: the worker has no session left (or was
                                     stopped); its connections' stamp records, per replica
                                     (loadgen.drivers.locust.raw)
``MSG_STOP``        master -> worker the run's duration is over: cancel what is in flight
==================  ===============  ============================================================

The client settings travel with the plan, the ``--api-key``/``--header`` values included (over
Locust's plain TCP channel: keep the master's port on a private network), but the job file holds
none: the master process gets them through its environment (loadgen.client.auth.HEADERS_ENV),
so they are never written down. No tokenizer travels: workers count output tokens from the
server's usage, else one per content chunk.
"""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from loadgen.client.auth import RequestHeaders
from loadgen.drivers.driver import ClientConfig, LoadPlan
from loadgen.request_spec import RequestSpec, message_text
from perfmodel.files import JSONObject
from results.folder.records import TOKEN_COLUMNS, ChunkRecord, RequestRecord

__all__ = [
    "DEFAULT_CLOCK_RESYNC_S",
    "MSG_CLIENT",
    "MSG_CLOCK",
    "MSG_DONE",
    "MSG_PING",
    "MSG_PLAN",
    "MSG_PONG",
    "MSG_READY",
    "MSG_RECORDS",
    "MSG_SETUP",
    "MSG_START",
    "MSG_STOP",
    "LocustJob",
    "parse_address",
    "plan_parts",
    "read_job",
    "record_from_wire",
    "record_to_wire",
    "spec_from_wire",
    "spec_to_wire",
    "write_job",
]

MSG_PING = "llmperf_ping"
MSG_PONG = "llmperf_pong"
MSG_SETUP = "llmperf_setup"
MSG_PLAN = "llmperf_plan"
MSG_READY = "llmperf_ready"
MSG_RECORDS = "llmperf_records"
MSG_CLIENT = "llmperf_client"
MSG_DONE = "llmperf_done"
MSG_STOP = "llmperf_stop"
MSG_START = "llmperf_start"
MSG_CLOCK = "llmperf_clock"

# How often a worker's clock is measured again during the load, s (LocustJob.clock_resync_s).
DEFAULT_CLOCK_RESYNC_S = 30.0

# What the master writes in the job's folder for the bench process to tail, one JSON per line.
RECORDS_FILE = "records.jsonl"
CLIENT_FILE = "client.jsonl"
EVENTS_FILE = "events.jsonl"

# A plan part stays near this many bytes of prompt text, so that one message never holds the
# master's event loop (and every worker's heartbeat behind it) for long.
PART_BYTES = 1 << 20


@dataclass(frozen=True)
class LocustJob:
    """One Locust run of a load plan, as the master process takes it.

    Attributes:
        plan: the load plan: closed loop (Locust users), or open loop (its schedule split
            among the workers, each sending its share at the planned times).
        client: how workers reach the server.
        t0_ns: the run clock's origin on this machine's ``perf_counter_ns``.
        workers: how many workers the run waits for (local and joining ones together).
        bind_host, bind_port: where the master listens for workers.
        out_dir: the folder the master writes its records, samples and events to.
        join_timeout_s: how long to wait for every worker before giving up, s.
        worker_timeout_s: a worker silent (no heartbeat) this long is lost, s.
        run_time_s: the run's bound after the load starts, s (the plan's duration, or a
            safety limit).
        clock_resync_s: each worker's clock is measured again this often during the load, s.
    """

    plan: LoadPlan
    client: ClientConfig
    t0_ns: int
    workers: int
    bind_host: str
    bind_port: int
    out_dir: str
    join_timeout_s: float
    worker_timeout_s: float
    run_time_s: float
    clock_resync_s: float = DEFAULT_CLOCK_RESYNC_S


def write_job(job: LocustJob, path: Path) -> Path:
    """Pickle ``job`` to ``path`` (a file only this machine's master process reads), without
    its request headers: the master takes those from its environment (:func:`read_job`)."""
    bare = dataclasses.replace(
        job, client=dataclasses.replace(job.client, headers=RequestHeaders())
    )
    path.write_bytes(pickle.dumps(bare, protocol=pickle.HIGHEST_PROTOCOL))
    return path


def read_job(path: str | Path) -> LocustJob:
    """The job pickled at ``path`` (written by :func:`write_job` of this same code), with the
    request headers this process's environment holds (loadgen.client.auth.HEADERS_ENV)."""
    job = pickle.loads(Path(path).read_bytes())
    if not isinstance(job, LocustJob):
        raise TypeError(f"{path}: not a Locust job file")
    headers = RequestHeaders.from_env()
    return dataclasses.replace(job, client=dataclasses.replace(job.client, headers=headers))


def parse_address(value: str, option: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for an IPv6 literal) as ``(host, port)``.

    Raises:
        ValueError: naming ``option``, the value and the form expected.
    """
    host, sep, port = value.strip().rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(
            f"{option} {value!r}: expected HOST:PORT with a port in 1..65535, e.g. 0.0.0.0:5557"
        )
    return host, int(port)


def client_to_wire(config: ClientConfig) -> JSONObject:
    """The client settings as a plain dict (every field of ClientConfig; the headers as a list
    of ``[name, value]`` pairs)."""
    row = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    row["headers"] = [list(item) for item in config.headers.items]
    return row


def client_from_wire(data: JSONObject) -> ClientConfig:
    """The inverse of :func:`client_to_wire`."""
    fields = dict(data)
    fields["headers"] = RequestHeaders(tuple((str(n), str(v)) for n, v in data["headers"]))
    fields["endpoints"] = tuple(str(url) for url in data.get("endpoints") or ())
    return ClientConfig(**fields)


def spec_to_wire(spec: RequestSpec) -> JSONObject:
    """A request as a plain dict (a (role, content) message as a list ``[role, content]``, an
    OpenAI message object as it is)."""
    row = dataclasses.asdict(spec)
    if spec.messages is not None:
        row["messages"] = [list(m) if isinstance(m, tuple) else dict(m) for m in spec.messages]
    if spec.fields is not None:
        row["fields"] = dict(spec.fields)
    return row


def spec_from_wire(row: JSONObject) -> RequestSpec:
    """The inverse of :func:`spec_to_wire`."""
    fields = dict(row)
    if fields.get("messages") is not None:
        fields["messages"] = tuple(
            dict(m) if isinstance(m, dict) else (str(m[0]), str(m[1])) for m in fields["messages"]
        )
    if "inputs" in fields:  # a pooling request's texts, a list on the wire
        fields["inputs"] = tuple(str(text) for text in fields["inputs"])
    if "tools" in fields:  # a list on the wire
        fields["tools"] = tuple(dict(tool) for tool in fields["tools"])
    if "images" in fields:
        fields["images"] = tuple(str(url) for url in fields["images"])
    return RequestSpec(**fields)


def plan_parts(
    sessions: Sequence[Sequence[RequestSpec]], part_bytes: int = PART_BYTES
) -> Iterator[list[list[JSONObject]]]:
    """``sessions`` in wire form, cut into parts of about ``part_bytes`` bytes of prompt text
    (at least one session a part; one empty part for no sessions)."""
    part: list[list[JSONObject]] = []
    size = 0
    for session in sessions:
        part.append([spec_to_wire(s) for s in session])
        size += sum(
            len(s.prompt)
            + sum(len(message_text(m)[1]) for m in s.messages or ())
            + sum(len(url) for url in s.images)
            for s in session
        )
        if size >= part_bytes:
            yield part
            part, size = [], 0
    if part or not sessions:
        yield part


# A chunk's columns on the wire: tokens.parquet's, less the request id its record carries.
_CHUNK_WIRE = TOKEN_COLUMNS[1:]


def record_to_wire(record: RequestRecord) -> JSONObject:
    """A JSON-able dict of ``record``; each chunk as the list of its tokens.parquet columns
    after ``request_id`` (``[index, t_s, n_tokens, reasoning]``)."""
    row = {
        f.name: getattr(record, f.name) for f in dataclasses.fields(record) if f.name != "chunks"
    }
    row["chunks"] = [[getattr(c, name) for name in _CHUNK_WIRE] for c in record.chunks]
    return row


def record_from_wire(row: JSONObject) -> RequestRecord:
    """The inverse of :func:`record_to_wire`."""
    fields = dict(row)
    rid = fields["request_id"]
    fields["chunks"] = [
        ChunkRecord(rid, **dict(zip(_CHUNK_WIRE, values, strict=False))) for values in row["chunks"]
    ]
    return RequestRecord(**fields)
