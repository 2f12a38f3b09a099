"""A caching CPU allocator for torch: compiled update steps without glibc's aligned-malloc cost.

Every call of a compiled update step allocates its buffers afresh, and every iteration of a
compiled loop (``funrl.control.scan``) allocates its body's: a PPO CartPole update (a 128-step
rollout, 16 minibatch steps) makes about 7,400 CPU allocations. torch's default CPU allocator takes
each from ``posix_memalign``, which glibc (2.36 here) serves through its slow aligned path —
``perf`` put a third of the one-seed PPO step in ``malloc``/``free``. :func:`use_caching_cpu_allocator`
installs an allocator that keeps freed blocks in per-size free lists and hands them out again
(the caching idea of torch's CUDA allocator, for CPU). It is process-wide, like torch's own
allocator setting, so funrl never installs it by itself: the command line (``funrl train``) and
the benchmarks do; in a script or notebook call it once, first thing.

The allocator is a small C++ file shipped with funrl, built on first use with the C++ compiler
``torch.compile`` already needs on CPU (``$CXX``, else ``g++``/``c++``/``clang++``) and cached
under ``$FUNRL_CACHE_DIR`` (default ``~/.cache/funrl``), keyed by the source, torch's version and
its C++ ABI. Cached memory stays with the process up to ``max_cached_bytes``; blocks above
``max_block_bytes`` bypass the cache. Memory it hands out is not reported to ``torch.profiler``'s
memory view.

The tensor objects themselves (torch's ``TensorImpl`` and ``StorageImpl``, a few hundred bytes
each, created and destroyed by the thousand per update) come from ``malloc``; glibc's per-thread
cache keeps only 7 freed chunks per size, so such bursts spill into its slower bins.
:func:`exec_with_malloc_tunables` restarts the process with that cache raised
(:data:`MALLOC_TUNABLES`; glibc reads it only at start-up): ``funrl train`` and the agents
benchmark do it.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from pathlib import Path
from typing import NamedTuple

import torch

from funrl import _native

__all__ = [
    "AllocatorStats",
    "MALLOC_TUNABLES",
    "exec_with_malloc_tunables",
    "use_caching_cpu_allocator",
    "use_default_cpu_allocator",
    "empty_cpu_cache",
    "cpu_allocator_stats",
]

_lock = threading.Lock()
_library: ctypes.CDLL | None = None


class AllocatorStats(NamedTuple):
    """State of the caching CPU allocator (all zero before it is first built)."""

    active: bool
    hits: int  # allocations served from the cache
    misses: int  # cacheable allocations that had to come from the system
    cached_bytes: int
    cached_blocks: int
    max_block_bytes: int
    max_cached_bytes: int


def _build() -> Path:
    torch_dir = Path(torch.__file__).parent
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    return _native.build(
        "caching_cpu_allocator.cpp",
        "funrl.allocator",
        "the caching CPU allocator",
        flags=["-O2", "-std=c++17", f"-D_GLIBCXX_USE_CXX11_ABI={abi}", f"-I{torch_dir / 'include'}"],
        libraries=[f"-L{torch_dir / 'lib'}", "-lc10", f"-Wl,-rpath,{torch_dir / 'lib'}"],
        key_extra=[torch.__version__],
    )


def _lib() -> ctypes.CDLL:
    global _library
    with _lock:
        if _library is None:
            if not sys.platform.startswith("linux"):
                raise RuntimeError(
                    f"funrl.allocator: the caching CPU allocator supports Linux; this is {sys.platform}"
                )
            lib = _native.load(_build(), "funrl.allocator")
            lib.funrl_caching_cpu_allocator_enable.argtypes = [ctypes.c_uint64, ctypes.c_uint64]
            lib.funrl_caching_cpu_allocator_stats.argtypes = [ctypes.POINTER(ctypes.c_uint64)]
            _library = lib
        return _library


MALLOC_TUNABLES = "glibc.malloc.tcache_count=1024"
"""glibc tunable funrl's command line runs with: 1,024 freed chunks per size class in the
per-thread cache instead of 7."""


def exec_with_malloc_tunables(argv: list[str]) -> None:
    """Restart this Python process as ``python ARGV...`` with :data:`MALLOC_TUNABLES` in
    ``GLIBC_TUNABLES``; return (doing nothing) off Linux or when a ``tcache_count`` is already
    set, so the restarted process goes on."""
    if not sys.platform.startswith("linux"):
        return
    current = os.environ.get("GLIBC_TUNABLES", "")
    if "glibc.malloc.tcache_count" in current:
        return
    os.environ["GLIBC_TUNABLES"] = f"{current}:{MALLOC_TUNABLES}" if current else MALLOC_TUNABLES
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, *argv])


def _check_bytes(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name}: expected a non-negative int number of bytes, got {value!r}")
    return value


def use_caching_cpu_allocator(max_block_bytes: int = 16 << 20, max_cached_bytes: int = 256 << 20) -> None:
    """Make torch allocate CPU tensors through funrl's caching allocator (process-wide).

    Calling it again only changes the limits. Tensors allocated before keep their memory and free
    it as before.

    Args:
        max_block_bytes: blocks larger than this are neither cached nor served from the cache.
        max_cached_bytes: freed memory kept for reuse, at most; beyond it frees go to the system.
    """
    _check_bytes("max_block_bytes", max_block_bytes)
    _check_bytes("max_cached_bytes", max_cached_bytes)
    _lib().funrl_caching_cpu_allocator_enable(max_block_bytes, max_cached_bytes)


def use_default_cpu_allocator() -> None:
    """Give CPU allocation back to the allocator in place before, and free the cached blocks.

    Blocks the caching allocator handed out and still in use return to the system when freed.
    """
    if _library is not None:
        _library.funrl_caching_cpu_allocator_disable()


def empty_cpu_cache() -> None:
    """Return every cached (free) block to the system; blocks in use are untouched."""
    if _library is not None:
        _library.funrl_caching_cpu_allocator_empty_cache()


def cpu_allocator_stats() -> AllocatorStats:
    """Hits, misses and cached memory of the caching CPU allocator, and whether it is in use."""
    if _library is None:
        return AllocatorStats(False, 0, 0, 0, 0, 0, 0)
    out = (ctypes.c_uint64 * 7)()
    _library.funrl_caching_cpu_allocator_stats(out)
    return AllocatorStats(bool(out[0]), *(int(v) for v in out[1:]))
