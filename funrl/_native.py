"""Small C++ helpers of funrl, built on first use and cached (the allocator, eager Threefry).

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
from collections.abc import Sequence
from pathlib import Path

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
