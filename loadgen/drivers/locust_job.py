"""What `bench run --driver locust` hands to Locust processes, and what comes back.

The job (a pickle file named by ``$LLM_PERF_LOCUST_JOB``, written by the bench process that
starts Locust) holds the load plan, the server, the run clock's origin and where the master
writes what it collects. Records travel from workers to the master as Locust messages, in the
plain "wire" form below, so workers on other machines need nothing but the job file.

Clocks: on the machine that started the run, every process shares CLOCK_MONOTONIC
(``time.perf_counter_ns``) and the job's ``t0_ns`` is used as is. A worker on another machine
(``same_host`` False) maps its own monotonic clock onto the run's through the wall clock
(``t0_unix_ns``): its times are then as good as the two machines' NTP sync.
"""

from __future__ import annotations

import dataclasses
import pickle
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.drivers.driver import LoadPlan
from results.records import TOKEN_COLUMNS, ChunkRecord, RequestRecord

__all__ = [
    "JOB_ENV",
    "LocustJob",
    "read_job",
    "record_from_wire",
    "record_to_wire",
    "write_job",
]

JOB_ENV = "LLM_PERF_LOCUST_JOB"
RECORDS_FILE = "records.jsonl"
CLIENT_FILE = "client.jsonl"


@dataclass(frozen=True)
class LocustJob:
    """One Locust run of a load plan (closed loop only: Locust users are closed-loop users).

    It holds no request header: the job is a file, and ``--api-key``/``--header`` values are
    never written down; the workers read them from their environment
    (loadgen.client.auth.HEADERS_ENV)."""

    plan: LoadPlan
    base_url: str
    model: str
    timeout_s: float
    t0_ns: int
    t0_unix_ns: int
    hostname: str
    workers: int
    out_dir: str
    tokenizer: Any = None

    def clock_origin_ns(self) -> int:
        """The run's t0 on this process's ``perf_counter_ns`` (see the module docstring)."""
        if socket.gethostname() == self.hostname:
            return self.t0_ns
        return time.perf_counter_ns() - (time.time_ns() - self.t0_unix_ns)


def write_job(job: LocustJob, path: Path) -> Path:
    """Pickle ``job`` to ``path`` (a file only this run's processes read)."""
    path.write_bytes(pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL))
    return path


def read_job(path: str | Path) -> LocustJob:
    """The job pickled at ``path`` (written by :func:`write_job` of this same code)."""
    job = pickle.loads(Path(path).read_bytes())
    if not isinstance(job, LocustJob):
        raise TypeError(f"{path}: not a Locust job file")
    return job


# A chunk's columns on the wire: tokens.parquet's, less the request id its record carries.
_CHUNK_WIRE = TOKEN_COLUMNS[1:]


def record_to_wire(record: RequestRecord) -> dict[str, Any]:
    """A JSON-able dict of ``record``; each chunk as the list of its tokens.parquet columns
    after ``request_id`` (``[index, t_s, n_tokens, reasoning]``)."""
    row = {
        f.name: getattr(record, f.name) for f in dataclasses.fields(record) if f.name != "chunks"
    }
    row["chunks"] = [[getattr(c, name) for name in _CHUNK_WIRE] for c in record.chunks]
    return row


def record_from_wire(row: dict[str, Any]) -> RequestRecord:
    """The inverse of :func:`record_to_wire`."""
    fields = dict(row)
    rid = fields["request_id"]
    fields["chunks"] = [ChunkRecord(rid, *values) for values in row["chunks"]]
    return RequestRecord(**fields)
