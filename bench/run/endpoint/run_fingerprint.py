"""run.json's "fingerprint": the machine and engine state a run's figures depend on.

:class:`RunFingerprint` takes a snapshot (probes.fingerprint: CPU frequency policy, GPU clocks,
throttle counters, ECC, driver and CUDA versions) before the load and another after it, watches
for XID errors in between (probes.xid_watch), and reads the engine's identity: its version
document (the adapter's ``version_path``) and /v1/models (served ids, roots, context). The
section it returns is what results.validity.run_validity judges.

GPUs are the engine's only when it runs on this host; for an engine elsewhere the GPU readings
are left out (and said so), while the CPU snapshot stays: it is the load generator's machine.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from engine_adapters.base import EngineAdapter
from perfmodel.files import JSONObject, JSONView
from probes.fingerprint import cpu_fingerprint, gpu_fingerprint
from probes.xid_watch import XidWatch
from results.folder.engine_steps import fetch_json

# The version document's fields that name a build, most specific first.
_VERSION_KEYS = ("version", "build_info", "sha", "commit")


def engine_identity(
    base_url: str, adapter: EngineAdapter, headers: Mapping[str, str], models: Any
) -> JSONObject:
    """The engine's own word on what it is: its version (and where it came from) and the
    models it serves (``models``: its /v1/models document, as the pre-flight read it)."""
    root = base_url.rstrip("/").removesuffix("/v1")
    version: Any = None
    source = None
    if adapter.version_path is not None:
        document = fetch_json(root, adapter.version_path, headers=headers)
        if isinstance(document, Mapping):
            found = {k: document[k] for k in _VERSION_KEYS if document.get(k) is not None}
            if found:
                version = found.get("version") or next(iter(found.values()))
                source = adapter.version_path
    served = []
    for item in (models or {}).get("data") or [] if isinstance(models, Mapping) else []:
        if isinstance(item, Mapping):
            served.append({k: item.get(k) for k in ("id", "root", "max_model_len") if k in item})
    return {
        "version": version,
        "version_source": source if version is not None else None,
        "version_reason": None
        if version is not None
        else f"no version at {adapter.version_path or '(no version document)'}",
        "models": served,
    }


class RunFingerprint:
    """Snapshots around the load (module docstring). ``local``: the engine runs on this host;
    ``gpu_indices``: the engine's GPUs (NVML indices; None: every GPU)."""

    def __init__(self, local: bool, gpu_indices: Sequence[int] | None = None) -> None:
        self._local = local
        self._gpus = gpu_indices
        self._start: JSONObject | None = None
        self._t0_ns = 0
        self._xid: XidWatch | None = None
        self._xid_result: JSONObject | None = None
        self._span_s: float | None = None

    def _snapshot(self) -> JSONObject:
        gpu = (
            gpu_fingerprint(indices=self._gpus)
            if self._local
            else {"available": False, "reason": "the engine runs on another host"}
        )
        return {"cpu": cpu_fingerprint(), "gpu": gpu}

    def begin(self) -> RunFingerprint:
        """The snapshot before the load; starts the XID watch where the GPUs are here."""
        self._start = self._snapshot()
        self._t0_ns = time.perf_counter_ns()
        if self._local and self._start["gpu"].get("available"):
            self._xid = XidWatch(indices=self._gpus).start()
        return self

    def stop_watch(self) -> None:
        """Stop the XID watch (the load is over, or failed); safe to call twice."""
        if self._xid is not None:
            self._xid_result = self._xid.stop()
            self._xid = None
        self._span_s = (time.perf_counter_ns() - self._t0_ns) / 1e9

    def end(self, run_t0_ns: int, engine: JSONView) -> JSONObject:
        """The section: both snapshots, the seconds of the load between them, the XID events
        (times in run seconds from ``run_t0_ns``) and ``engine`` (:func:`engine_identity`)."""
        if self._xid is not None or self._span_s is None:
            self.stop_watch()
        xid, span_s = self._xid_result, self._span_s
        if xid is not None:
            xid["events"] = [{"t_s": (e.pop("t_ns") - run_t0_ns) / 1e9, **e} for e in xid["events"]]
        return {
            "start": self._start,
            "end": self._snapshot(),
            "span_s": span_s,
            "xid": xid,
            "engine": dict(engine),
        }
