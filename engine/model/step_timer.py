"""When one forward's device work has finished: the model runner's step timer.

`LLMEngine.step` reads the host clock around `execute_model` and records the difference as the
step's `forward_s`. On a CUDA device kernels are only queued when the Python call returns, so
without a sync a step that samples nothing (a chunked-prefill continuation: no token id is read
back) would record its launch time and its GPU work would land on the next step's figure. The
runner therefore brackets every step, sampling or not, with a `StepTimer`: on CUDA it records
an event before and after the work and waits for the end event before `execute_model`
returns; the events also give the device's own time for the step (`last_device_s`, what the GPU
check compares `forward_s` with). On a CPU every op has finished when it returns: the timer does
nothing and `last_device_s` stays None.
"""

from __future__ import annotations

import torch


class StepTimer:
    """Brackets one step's device work: ``start()`` before the first kernel, ``stop()`` after
    the last; ``stop()`` returns once the device has finished that work (CUDA: an event
    synchronize, which waits for this stream's work only, on this device only)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.last_device_s: float | None = None
        self._events: tuple[torch.cuda.Event, torch.cuda.Event] | None = None
        if device.type == "cuda":
            self._events = (
                torch.cuda.Event(enable_timing=True),
                torch.cuda.Event(enable_timing=True),
            )

    @property
    def syncs(self) -> bool:
        """Whether ``stop()`` waits for the device (True on CUDA)."""
        return self._events is not None

    def start(self) -> None:
        """Mark the start of a step's device work (on the current stream of ``device``)."""
        if self._events is not None:
            with torch.cuda.device(self.device):
                self._events[0].record()

    def stop(self) -> None:
        """Mark the end of the step's work and wait for it; sets ``last_device_s`` (seconds
        between the two events, as the device measured them) on CUDA."""
        if self._events is None:
            return
        begin, end = self._events
        with torch.cuda.device(self.device):
            end.record()
        end.synchronize()
        self.last_device_s = begin.elapsed_time(end) / 1e3  # elapsed_time is milliseconds
