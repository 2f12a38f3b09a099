"""Small C++ helpers of funrl, built on first use and cached (the allocator, eager kernels).

Each source in ``funrl/_csrc`` is compiled with the C++ compiler ``torch.compile`` already needs
on CPU (``$CXX``, else ``g++``/``c++``/``clang++``) into ``$FUNRL_CACHE_DIR`` (default
``~/.cache/funrl``), under a name keyed by the source, the compiler and the flags, and loaded with
``ctypes``. A build is written beside its final name and renamed into place, so a concurrent or
interrupted build never leaves a half-written library behind.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch._C._functorch import is_functorch_wrapped_tensor

SOURCES = Path(__file__).with_name("_csrc")


def cache_dir() -> Path:
    if os.environ.get("FUNRL_CACHE_DIR"):
        return Path(os.environ["FUNRL_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "funrl"


def compiler(owner: str, what: str) -> str:
    """The C++ compiler: ``$CXX`` if set, else the first of g++, c++, clang++ on ``PATH``."""
    if os.environ.get("CXX"):
        found = shutil.which(os.environ["CXX"])
        if found is None:
            raise RuntimeError(
                f"{owner}: CXX={os.environ['CXX']!r} is not an executable on PATH; "
                "set CXX to a C++ compiler (the one torch.compile uses on CPU)"
            )
        return found
    for name in ("g++", "c++", "clang++"):
        found = shutil.which(name)
        if found is not None:
            return found
    raise RuntimeError(
        f"{owner}: building {what} needs a C++ compiler (g++, c++ or clang++ on PATH, or $CXX); "
        "none was found"
    )


def build(
    source: str,
    owner: str,
    what: str,
    flags: Sequence[str],
    libraries: Sequence[str] = (),
    key_extra: Sequence[str] = (),
) -> Path:
    """Compile ``_csrc/<source>`` into a cached shared library; its path.

    Args:
        source: file name under ``funrl/_csrc``.
        owner: the module named in errors (``"funrl.allocator"``).
        what: what is built, for errors (``"the caching CPU allocator"``).
        flags: compiler flags besides ``-shared -fPIC``, the source and the output.
        libraries: linker arguments, placed after the source (``-L``, ``-l``, ``-Wl,...``).
        key_extra: more strings the cached build depends on (a torch version, an ABI).
    """
    path = SOURCES / source
    cxx = compiler(owner, what)
    key = hashlib.sha256(
        b"\0".join([path.read_bytes(), cxx.encode(), *(s.encode() for s in (*flags, *libraries, *key_extra))])
    ).hexdigest()[:20]
    target = cache_dir() / f"{path.stem}-{key}.so"
    if target.exists():
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    except OSError as exc:
        raise RuntimeError(
            f"{owner}: cannot write the build of {what} into {target.parent} ({exc}); "
            "set FUNRL_CACHE_DIR to a writable directory"
        ) from None
    os.close(fd)
    command = [cxx, *flags, "-shared", "-fPIC", str(path), *libraries, "-o", tmp]
    try:
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(
                f"{owner}: building {what} failed ({' '.join(command)}):\n{result.stderr[-4000:]}"
            )
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def load(path: Path, owner: str) -> ctypes.CDLL:
    """``ctypes.CDLL(path)``; a library that does not load is a RuntimeError naming it."""
    try:
        return ctypes.CDLL(str(path))
    except OSError as exc:
        raise RuntimeError(f"{owner}: loading {path} failed ({exc}); delete it to have it rebuilt") from None


class LazyLibrary:
    """A library of ``_csrc`` built and loaded on its first :meth:`get`, once per process.

    ``get`` returns None when it cannot be (no compiler, no writable cache): callers then run
    their torch ops, which compute the same values.
    """

    def __init__(self, source: str, owner: str, what: str, declare: Callable[[ctypes.CDLL], None]):
        self.source, self.owner, self.what, self.declare = source, owner, what, declare
        self._lock = threading.Lock()
        self._lib: ctypes.CDLL | None = None
        self._tried = False

    def get(self) -> ctypes.CDLL | None:
        if self._tried:  # no lock once settled: this is on every eager call's path
            return self._lib
        with self._lock:
            if not self._tried:
                try:
                    lib = load(build(self.source, self.owner, self.what, ["-O3"]), self.owner)
                    self.declare(lib)
                    self._lib = lib
                except RuntimeError:
                    self._lib = None
                self._tried = True
            return self._lib


def plain_eager(*values: object, dtype: torch.dtype | None = None) -> bool:
    """True when nothing records the ops (dynamo, a dispatch or function mode, jit tracing) and
    every tensor among ``values`` is a plain CPU tensor (of ``dtype`` if given; not wrapped by
    vmap, grad or functionalization): then a C++ kernel may stand in for torch ops.

    Anything that traces or transforms ops must see the torch ops themselves.
    """
    if (
        torch.compiler.is_compiling()
        or torch._C._len_torch_dispatch_stack() > 0
        or torch._C._is_torch_function_mode_enabled()
        or torch._C._get_tracing_state() is not None
    ):
        return False
    for v in values:
        if isinstance(v, torch.Tensor) and not (
            type(v) is torch.Tensor
            and v.is_cpu
            and (dtype is None or v.dtype == dtype)
            and not is_functorch_wrapped_tensor(v)
            and not torch._is_functional_tensor(v)
        ):
            return False
    return True
