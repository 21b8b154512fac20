"""The name a process of `bench serve` shows to ps, top and bench's CPU probe.

`bench serve` runs as "engine-front" (the HTTP server, tokenizer and output processor) with its
core process as "engine-core", or as "engine" when it steps the engine in a thread of its own
(``--no-engine-core-process``). Linux keeps a process's name in its main thread's name
(``prctl(PR_SET_NAME)``, at most 15 bytes), which /proc/<pid>/comm and psutil's ``name()`` read;
elsewhere the name stays the interpreter's.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
import threading

FRONT_TITLE = "engine-front"
CORE_TITLE = "engine-core"
SINGLE_PROCESS_TITLE = "engine"

_PR_SET_NAME = 15  # linux/prctl.h
_MAX_NAME_BYTES = 15  # the kernel's TASK_COMM_LEN (16) less the terminating NUL


def set_process_title(title: str) -> bool:
    """Name this process ``title`` (ASCII, at most 15 bytes); must run on the main thread,
    whose name is the process's. Returns whether the name was set (False off Linux)."""
    raw = title.encode("ascii")
    if len(raw) > _MAX_NAME_BYTES:
        raise ValueError(f"process title {title!r}: at most {_MAX_NAME_BYTES} bytes")
    if not sys.platform.startswith("linux") or threading.current_thread() is not (
        threading.main_thread()
    ):
        return False
    libc_name = ctypes.util.find_library("c")
    if libc_name is None:
        return False
    libc = ctypes.CDLL(libc_name, use_errno=True)
    return libc.prctl(_PR_SET_NAME, ctypes.c_char_p(raw), 0, 0, 0) == 0
