"""engine/native/cpu_allocator.py: after retain_freed_memory, glibc serves a 16 MiB block from its
heap instead of a fresh mmap, and keeps it there once freed. Each case runs in a fresh
interpreter, since malloc settings hold for the whole process."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc", reason="mallopt and mallinfo2 are glibc's"
)

# mmapped blocks (hblks) and free heap bytes (fordblks) around malloc(16 MiB) and free().
PROBE = """
import ctypes, sys
from engine.native.cpu_allocator import retain_freed_memory
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
if sys.argv[1] == "retain":
    assert retain_freed_memory() is None
before = libc.mallinfo2().hblks
block = libc.malloc(16 * 1024**2)
during = libc.mallinfo2().hblks
libc.free(block)
print(during - before, libc.mallinfo2().fordblks >= 16 * 1024**2)
"""


def _probe(mode: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True
    )
    return out.stdout.split()


def test_glibc_default_maps_a_large_block_and_returns_it() -> None:
    """The behaviour the settings change: one mmap for the block, gone from the heap after."""
    assert _probe("default") == ["1", "False"]


def test_retained_block_comes_from_the_heap_and_stays_for_reuse() -> None:
    assert _probe("retain") == ["0", "True"]
