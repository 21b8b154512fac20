"""A step's host-to-device input copies: one pinned staging buffer, one non-blocking copy.

`ModelRunner._prepare` builds a step's inputs on the host (token ids, positions, KV slots, the
sequences' context lengths and block tables, all int64). Copied one by one from pageable memory,
each is a blocking copy: the host waits for the device five times a step before it can queue
the first kernel. On CUDA `InputStaging` packs them into one pinned host buffer, reused step
after step (grown when a step needs more), and issues one `non_blocking=True` copy; the device
tensors handed back are views of that one copy. Reusing the buffer is safe because the runner
waits for each step's device work before the next step is prepared (engine/model/step_timer.py),
so no copy from the previous step is still reading it. On a CPU nothing is copied: the arrays
become tensors in place, as before.
"""

from __future__ import annotations

import numpy as np
import torch


class InputStaging:
    """Turns a step's int64 host arrays into tensors on ``device``.

    ``staged`` (default: the device is CUDA) selects the packed path: one pinned buffer (pinned
    where CUDA is present) and one copy per step. Without it the arrays become tensors with no
    copy at all (the CPU path).
    """

    def __init__(self, device: torch.device, staged: bool | None = None) -> None:
        self.device = device
        self.staged = device.type == "cuda" if staged is None else staged
        self._pin = self.staged and torch.cuda.is_available()
        self._host = torch.empty(0, dtype=torch.int64)
        self.copies = 0  # host-to-device copies issued so far (one per staged step)

    @property
    def capacity(self) -> int:
        """Elements (int64) the reused host buffer holds now."""
        return self._host.numel()

    def to_device(self, arrays: list[np.ndarray]) -> list[torch.Tensor]:
        """``arrays`` (int64, any shapes) as int64 tensors on the device, same shapes, in order.

        Staged: they share one device allocation, written by one non-blocking copy from the
        pinned buffer; the caller must not stage the next step before this step's device work
        has finished (see the module docstring).
        """
        flat = [np.ascontiguousarray(a, dtype=np.int64) for a in arrays]
        if not self.staged:
            return [torch.from_numpy(a) for a in flat]
        total = sum(a.size for a in flat)
        if total > self.capacity:
            # Grow geometrically, so a slowly rising batch does not re-pin every step.
            size = max(total, 2 * self.capacity, 1024)
            self._host = torch.empty(size, dtype=torch.int64, pin_memory=self._pin)
        host = self._host.numpy()
        offset = 0
        for a in flat:
            host[offset : offset + a.size] = a.reshape(-1)
            offset += a.size
        # copy=True: on a CPU test device .to() would otherwise alias the reused buffer.
        packed = self._host[:total].to(self.device, non_blocking=True, copy=True)
        self.copies += 1
        out, offset = [], 0
        for a in flat:
            out.append(packed[offset : offset + a.size].view(a.shape))
            offset += a.size
        return out
