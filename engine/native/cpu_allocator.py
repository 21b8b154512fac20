"""glibc malloc settings for a process that runs the model on the CPU.

A prefill step allocates activations of megabytes ([2048 tokens, 1408] in bf16 is 5.8 MB) and
frees them an op later. glibc serves blocks that large with mmap, or trims the top of its heap
back to the OS once more than M_TRIM_THRESHOLD is free there; either way the next step's
allocation comes back as fresh pages, and the kernel zero-fills every 4 KiB of it on first
touch. On this project's CPU machine that tripled the time of the tiny model's gate_up matmul
inside a 2,048-token prefill step (25.6 ms against 9.3 ms, torch.profiler, one thread) and
slowed the step by about a fifth. vLLM's CPU backend preloads tcmalloc for the same reason;
the same effect here comes from two mallopt calls: serve every block from the heap up to
glibc's largest mmap threshold, and trim the heap only past a gigabyte free.

The settings hold for the whole process, so only the processes that exist to run the model
(the engine core, or a server whose engine steps in a thread) apply them.
"""

from __future__ import annotations

import ctypes
import logging
import platform

log = logging.getLogger(__name__)

# <malloc.h>
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

# glibc refuses an mmap threshold above HEAP_MAX_SIZE / 2: 32 MiB on 64-bit.
MMAP_THRESHOLD_BYTES = 32 * 1024**2
TRIM_THRESHOLD_BYTES = 1024**3


def retain_freed_memory() -> str | None:
    """Keep freed blocks of up to MMAP_THRESHOLD_BYTES in the heap, and up to
    TRIM_THRESHOLD_BYTES of free heap, for reuse. None when applied, else why not (another C
    library, or glibc refused a setting); the process runs either way."""
    if platform.libc_ver()[0] != "glibc":
        return f"the C library is {platform.libc_ver()[0] or 'unknown'}, not glibc"
    libc = ctypes.CDLL(None)
    for param, value, name in (
        (M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES, "M_MMAP_THRESHOLD"),
        (M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES, "M_TRIM_THRESHOLD"),
    ):
        if libc.mallopt(ctypes.c_int(param), ctypes.c_int(value)) != 1:
            return f"glibc refused mallopt({name}, {value})"
    log.debug("malloc: mmap threshold %d bytes, trim threshold %d", MMAP_THRESHOLD_BYTES,
              TRIM_THRESHOLD_BYTES)  # fmt: skip
    return None
