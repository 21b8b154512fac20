"""The C paged decode attention kernel (engine/csrc/paged_decode_attention.c), built on first use.

The torch path gathers every decode sequence's K and V into a padded tensor before two batched
matmuls: at 100 sequences of ~200 tokens that copy, and the padding, cost more than the attention
itself. The kernel reads K and V once, straight from the block-table cache. It is compiled with
the system C compiler (``$CC``, else ``cc``) into the cache folder (engine.tokenizer.cache_root),
keyed by the source, the flags, the compiler and this CPU's model and flags, so a build made for
one CPU is never loaded on another. It covers CPU float32 or bfloat16 queries over a cache of
the same dtype; everything else (CUDA, float16, an fp8 cache) takes the torch path.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

from engine.cpu_features import cpu_signature
from engine.tokenizer import cache_root

log = logging.getLogger(__name__)

SOURCE = Path(__file__).parent / "csrc" / "paged_decode_attention.c"
# -ffast-math at compile time only: it lets gcc call glibc's vector expf (libmvec) in the
# softmax, while linking without it keeps crtfastmath.o, which would set flush-to-zero for the
# whole process, torch included, out of the library.
COMPILE_FLAGS = ("-O3", "-march=native", "-ffast-math", "-fopenmp", "-fPIC", "-std=c11")
LINK_FLAGS = ("-shared", "-fopenmp")

_state: dict[str, object] = {}
_SUFFIX = {torch.float32: "f32", torch.bfloat16: "bf16"}


class NativeKernelError(RuntimeError):
    """The kernel cannot be built or loaded here; the message says why."""


def _compiler() -> str:
    cc = os.environ.get("CC", "cc")
    path = shutil.which(cc)
    if path is None:
        raise NativeKernelError(f"no C compiler: {cc!r} is not on PATH (set $CC or install gcc)")
    return path


def _build(cc: str) -> Path:
    source = SOURCE.read_bytes()
    version = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout
    key = hashlib.sha256(
        b"\0".join(
            [
                source,
                " ".join(COMPILE_FLAGS + LINK_FLAGS).encode(),
                version.encode(),
                cpu_signature().encode(),
            ]
        )
    ).hexdigest()[:16]
    lib = cache_root() / "native" / key / "libpaged_decode_attention.so"
    if lib.is_file():
        return lib
    lib.parent.mkdir(parents=True, exist_ok=True)
    # Build beside the target and rename: concurrent processes never load a half-written file.
    with tempfile.TemporaryDirectory(dir=lib.parent) as tmp:
        obj, out = Path(tmp) / "kernel.o", Path(tmp) / lib.name
        for cmd in (
            [cc, *COMPILE_FLAGS, "-c", "-o", str(obj), str(SOURCE)],
            [cc, *LINK_FLAGS, "-o", str(out), str(obj), "-lm"],
        ):
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise NativeKernelError(f"{cc} failed to build {SOURCE.name}: {proc.stderr[-500:]}")
        os.replace(out, lib)
    return lib


def load() -> ctypes.CDLL:
    """The kernel's library, built if needed. Raises NativeKernelError with the reason."""
    if "lib" in _state:
        return _state["lib"]  # type: ignore[return-value]
    if "error" in _state:
        raise NativeKernelError(str(_state["error"]))
    try:
        lib = ctypes.CDLL(str(_build(_compiler())))
    except (NativeKernelError, OSError) as e:
        _state["error"] = str(e)
        raise NativeKernelError(str(e)) from e
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    for suffix in _SUFFIX.values():
        fn = getattr(lib, f"paged_decode_attention_{suffix}")
        fn.argtypes = [ptr, ptr, ptr, i64, ptr, ptr, i64, i64, i64, i64, i64, i64,
                       ctypes.c_float, ctypes.c_float, ctypes.c_int]  # fmt: skip
        fn.restype = ctypes.c_int
    _state["lib"] = lib
    return lib


def available() -> str | None:
    """None when the kernel loads here, else why not (built on the first call)."""
    try:
        load()
    except NativeKernelError as e:
        return str(e)
    return None


def supports_dtypes(device: torch.device, dtype: torch.dtype, kv_dtype: torch.dtype) -> bool:
    """Whether the kernel covers a model of ``dtype`` on ``device`` with a ``kv_dtype`` cache."""
    return device.type == "cpu" and dtype in _SUFFIX and kv_dtype == dtype


def supports(q: torch.Tensor, kv_cache: torch.Tensor) -> bool:
    """Whether the kernel covers these tensors (see supports_dtypes)."""
    return supports_dtypes(q.device, q.dtype, kv_cache.dtype)


def paged_decode_attention(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    v_scale: float = 1.0,
) -> torch.Tensor:
    """Attention output [num_seqs, num_heads, head_dim] for one query token per sequence.

    q [num_seqs, num_heads, head_dim] float32 or bfloat16; kv_cache [2, num_blocks,
    block_size, num_kv_heads, head_dim] of q's dtype, contiguous, already holding every query
    token's own K/V; block_tables int64 [num_seqs, width] covering each context; seq_lens int64
    [num_seqs], each >= 1 tokens.
    """
    if not supports(q, kv_cache):
        raise ValueError(
            f"the kernel covers CPU float32/bfloat16 with a cache of the same dtype, got "
            f"{q.dtype} queries on {q.device} over a {kv_cache.dtype} cache"
        )
    fn = getattr(load(), f"paged_decode_attention_{_SUFFIX[q.dtype]}")
    num_seqs, num_heads, head_dim = q.shape
    _, num_blocks, block_size, num_kv_heads, cache_head_dim = kv_cache.shape
    if cache_head_dim != head_dim or num_heads % num_kv_heads:
        raise ValueError(
            f"q has {num_heads} heads of {head_dim}, the cache {num_kv_heads} KV heads of "
            f"{cache_head_dim}: head_dim must match and num_heads be a multiple of num_kv_heads"
        )
    if not kv_cache.is_contiguous():
        raise ValueError("kv_cache must be contiguous (the engine allocates it so)")
    q = q.contiguous()
    tables = block_tables.contiguous()
    lens = seq_lens.contiguous()
    out = torch.empty_like(q)
    rc = fn(
        q.data_ptr(), kv_cache.data_ptr(), tables.data_ptr(), tables.shape[1], lens.data_ptr(),
        out.data_ptr(), num_seqs, num_heads, num_kv_heads, head_dim, num_blocks, block_size,
        scale, v_scale, torch.get_num_threads(),
    )  # fmt: skip
    if rc != 0:
        raise MemoryError("paged decode attention could not allocate its scratch buffers")
    return out
