"""XID errors during a run: NVML's critical-error events, caught as they happen.

An XID is the driver's report of a GPU fault (a page fault, a fallen-off-the-bus GPU, an ECC
page retirement, a hung channel). A run during which one fired measured a faulty or recovering
GPU, so results.validity.run_validity marks it. NVML delivers them as events: the watch registers
every
GPU for ``nvmlEventTypeXidCriticalError`` and waits on the event set in a thread, in short waits
so that :meth:`XidWatch.stop` returns promptly. Nothing is counted before :meth:`start` (NVML
keeps no history of events).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from perfmodel.files import JSONObject

_WAIT_MS = 200


class XidWatch:
    """Collects XID events from :meth:`start` to :meth:`stop` (module docstring).

    ``nvml`` is the pynvml module (None: imported); ``indices`` the NVML indices to watch (None:
    every GPU); ``clock_ns`` stamps each event (the run's monotonic clock).
    """

    def __init__(
        self,
        nvml: Any | None = None,
        indices: Sequence[int] | None = None,
        clock_ns: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        self._nvml = nvml
        self._indices = indices
        self._clock_ns = clock_ns
        self._events: list[JSONObject] = []
        self._reason: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._event_set: Any = None
        self._watched: list[int] = []

    def start(self) -> XidWatch:
        """Register for XID events and start waiting; a GPU-less machine just records why."""
        nvml = self._nvml
        if nvml is None:
            try:
                import pynvml as nvml
            except ImportError:
                self._reason = "nvidia-ml-py is not installed"
                return self
            self._nvml = nvml
        try:
            nvml.nvmlInit()
        except Exception as exc:  # no library, no driver, no GPU
            self._reason = f"NVML did not start: {exc}"
            return self
        try:
            self._event_set = nvml.nvmlEventSetCreate()
            count = nvml.nvmlDeviceGetCount()
            indices = range(count) if self._indices is None else self._indices
            refused = []
            for index in indices:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                try:
                    nvml.nvmlDeviceRegisterEvents(
                        handle, nvml.nvmlEventTypeXidCriticalError, self._event_set
                    )
                    self._watched.append(index)
                except nvml.NVMLError as exc:
                    refused.append(f"GPU {index}: {exc}")
            if refused:
                self._reason = "XID events not delivered for " + "; ".join(refused)
        except nvml.NVMLError as exc:
            self._reason = f"NVML refused an event set: {exc}"
        if not self._watched:
            self._close()
            return self
        self._thread = threading.Thread(target=self._wait, name="xid-watch", daemon=True)
        self._thread.start()
        return self

    def _wait(self) -> None:
        nvml = self._nvml
        while not self._stop.is_set():
            try:
                data = nvml.nvmlEventSetWait_v2(self._event_set, _WAIT_MS)
            except nvml.NVMLError as exc:
                if getattr(exc, "value", None) == nvml.NVML_ERROR_TIMEOUT:
                    continue
                self._reason = f"waiting for XID events failed: {exc}"
                return
            self._events.append(
                {
                    "t_ns": self._clock_ns(),
                    "gpu": self._index_of(data.device),
                    "xid": int(data.eventData),
                }
            )

    def _index_of(self, handle: Any) -> int | None:
        try:
            return int(self._nvml.nvmlDeviceGetIndex(handle))
        except self._nvml.NVMLError:
            return None

    def _close(self) -> None:
        nvml = self._nvml
        if self._event_set is not None:
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlEventSetFree(self._event_set)
            self._event_set = None
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()

    def stop(self) -> JSONObject:
        """Stop waiting; ``{"watched": [NVML indices], "events": [{t_ns, gpu, xid}], "reason"}``
        (``reason``: why some or all GPUs were not watched, else None). Safe to call twice."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=2 * _WAIT_MS / 1000 + 1)
            self._thread = None
            self._close()
        return {
            "watched": list(self._watched),
            "events": list(self._events),
            "reason": self._reason,
        }
