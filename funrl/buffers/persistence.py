"""Saving and loading buffer states through tensordict's memory-mapped tensors.

``save(state, path)`` writes a directory::

    path/
      tensors/          TensorDict.memmap of the state's leaves ("0", "1", ... in tree order)
      funrl_buffer.json format tag, the state's tree structure, each leaf's dtype, shape, size and
                        BLAKE2b checksum

It is written under a temporary name next to ``path`` and renamed into place once complete, so
``path`` never holds a half-written buffer. The tensor files are made read-only: ``load(path,
mmap=True)`` then maps them copy-on-write (tensordict opens read-only files with a private
mapping; ``load`` maps them privately itself in any case), so a loaded buffer can be added to
without touching the saved copy, and a buffer
larger than RAM opens for offline RL with pages read on demand. ``load`` checks the structure,
every file's size and (``verify=True``, default) every checksum before returning; any mismatch
raises :class:`BufferFileError` and nothing is returned.

The tree structure is stored as JSON, not pickle: loading never imports or runs code from the
file. NamedTuple containers are rebuilt from already-imported classes only.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import sys
import uuid
from pathlib import Path
from typing import Any

import torch

from funrl.buffers._core import check_fresh

__all__ = ["save", "load", "BufferFileError"]

FORMAT = "funrl.buffers/4"
"""Format 4 stores the state's leaves as they are: the item pytree's storage one tensor per leaf.
Formats 2 and 3 (packed storage: one tensor per dtype) are refused with a clear error rather than
loaded into a state ``add`` rejects."""
_META = "funrl_buffer.json"
_TENSORS = "tensors"
_CHUNK = 1 << 26  # 64 MiB per hashing step: bounded memory for memory-mapped leaves


class BufferFileError(ValueError):
    """A saved buffer is missing, truncated, corrupted or of an unknown format."""


def _encode(node: Any, leaves: list[torch.Tensor], where: str) -> Any:
    if isinstance(node, torch.Tensor):
        leaves.append(node)
        return {"leaf": len(leaves) - 1}
    if node is None:
        return {"none": True}
    if isinstance(node, tuple) and hasattr(node, "_fields"):
        cls = type(node)
        fields = [[f, _encode(getattr(node, f), leaves, f"{where}.{f}")] for f in node._fields]
        return {"namedtuple": f"{cls.__module__}:{cls.__qualname__}", "fields": fields}
    if isinstance(node, dict):
        items = []
        for k, v in node.items():
            if not isinstance(k, (str, int)) or isinstance(k, bool):
                raise TypeError(f"state: dict key {k!r} at {where} must be a str or int to be saved")
            items.append([k, _encode(v, leaves, f"{where}[{k!r}]")])
        return {"dict": items}
    if isinstance(node, (list, tuple)):
        kind = "list" if isinstance(node, list) else "tuple"
        return {kind: [_encode(v, leaves, f"{where}[{i}]") for i, v in enumerate(node)]}
    raise TypeError(
        f"state: cannot save {type(node).__name__} at {where}; expected tensors in dicts/lists/tuples"
    )


def _namedtuple_class(name: str) -> type:
    module_name, _, qualname = name.partition(":")
    module = sys.modules.get(module_name)  # never import: loading runs no code named by the file
    obj: Any = module
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    if not (isinstance(obj, type) and issubclass(obj, tuple) and hasattr(obj, "_fields")):
        raise BufferFileError(f"path: the saved state uses NamedTuple {name}, which is not an imported class")
    return obj


def _decode(node: Any, leaves: list[torch.Tensor]) -> Any:
    if not isinstance(node, dict) or len(node) not in (1, 2):
        raise BufferFileError(f"path: malformed tree structure entry {node!r}")
    if "leaf" in node:
        return leaves[node["leaf"]]
    if "none" in node:
        return None
    if "namedtuple" in node:
        cls = _namedtuple_class(node["namedtuple"])
        return cls(**{f: _decode(v, leaves) for f, v in node["fields"]})
    if "dict" in node:
        return {k: _decode(v, leaves) for k, v in node["dict"]}
    if "list" in node:
        return [_decode(v, leaves) for v in node["list"]]
    if "tuple" in node:
        return tuple(_decode(v, leaves) for v in node["tuple"])
    raise BufferFileError(f"path: malformed tree structure entry {node!r}")


def _checksum(tensor: torch.Tensor) -> str:
    data = tensor.reshape(-1).view(torch.uint8) if tensor.numel() else torch.empty(0, dtype=torch.uint8)
    digest = hashlib.blake2b(digest_size=16)
    for start in range(0, data.numel(), _CHUNK):
        digest.update(data[start : start + _CHUNK].numpy().tobytes())
    return digest.hexdigest()


def save(state: Any, path: str | os.PathLike) -> None:
    """Write ``state`` (any funrl buffer state, also a stacked batch of them) to directory ``path``.

    Replaces an existing buffer at ``path``: the new copy is complete on disk before the old one
    is moved aside and removed. ``state`` must be current (a stale state raises).
    """
    if hasattr(state, "count") and hasattr(state, "storage_count"):
        check_fresh(state.count, state.storage_count, "save")
    leaves: list[torch.Tensor] = []
    spec = _encode(state, leaves, "state")
    cpu_leaves = [leaf.detach().to("cpu").contiguous() for leaf in leaves]
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex}"
    try:
        tmp.mkdir()
        from tensordict import TensorDict  # on first use: importing tensordict patches torch.func.vmap

        tensors = TensorDict({str(i): leaf for i, leaf in enumerate(cpu_leaves)}, batch_size=[])
        tensors.memmap(prefix=str(tmp / _TENSORS))
        meta = {
            "format": FORMAT,
            "spec": spec,
            "leaves": [
                {
                    "dtype": str(leaf.dtype).removeprefix("torch."),
                    "shape": list(leaf.shape),
                    "nbytes": leaf.numel() * leaf.element_size(),
                    "blake2b": _checksum(leaf),
                }
                for leaf in cpu_leaves
            ],
        }
        for f in (tmp / _TENSORS).iterdir():
            f.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
        with open(tmp / _META, "w") as fh:
            json.dump(meta, fh)
            fh.flush()
            os.fsync(fh.fileno())
        old = None
        if target.exists():
            old = target.parent / f".{target.name}.old-{uuid.uuid4().hex}"
            os.replace(target, old)
        os.replace(tmp, target)
        if old is not None:
            shutil.rmtree(old)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def load(path: str | os.PathLike, mmap: bool = True, verify: bool = True) -> Any:
    """Read a state written by :func:`save`; exactly the saved contents, write position, priorities.

    mmap=True: leaves are memory-mapped copy-on-write from the saved files (CPU); writes (``add``)
    stay in memory. mmap=False: leaves are read into ordinary tensors. verify=True: every leaf's
    checksum is checked (reads every byte once). Raises :class:`BufferFileError` for a missing,
    truncated or corrupted buffer, or one of another format.
    """
    root = Path(path)
    meta_file = root / _META
    if not meta_file.is_file():
        raise BufferFileError(
            f"path: {root} is not a saved funrl buffer (no {_META}; an interrupted save leaves none)"
        )
    try:
        meta = json.loads(meta_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise BufferFileError(f"path: {meta_file} is corrupted ({err})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else None
        hint = (
            " (written by an earlier funrl, whose buffers this one does not read)"
            if isinstance(found, str) and found.startswith("funrl.buffers/")
            else ""
        )
        raise BufferFileError(f"path: {meta_file} has format {found!r}, expected {FORMAT!r}{hint}")
    expected = meta["leaves"]
    for i, info in enumerate(expected):
        file = root / _TENSORS / f"{i}.memmap"
        size = file.stat().st_size if file.is_file() else None
        if info["nbytes"] and size != info["nbytes"]:
            raise BufferFileError(
                f"path: leaf {i} file {file} has {size} bytes, expected {info['nbytes']} "
                "(truncated or missing)"
            )
    from tensordict import TensorDict  # on first use: importing tensordict patches torch.func.vmap

    try:
        tensors = TensorDict.load_memmap(str(root / _TENSORS))
    except Exception as err:  # tensordict reports bad metadata in several ways; none may escape half-read
        raise BufferFileError(f"path: cannot open {root / _TENSORS}: {err}") from err
    leaves = []
    for i, info in enumerate(expected):
        key = str(i)
        if key not in tensors.keys():
            raise BufferFileError(f"path: leaf {i} is missing from {root / _TENSORS}")
        leaf = tensors[key]
        dtype = getattr(torch, info["dtype"], None)
        if leaf.dtype != dtype or list(leaf.shape) != info["shape"]:
            raise BufferFileError(
                f"path: leaf {i} is {leaf.dtype} {list(leaf.shape)}, expected {info['dtype']} {info['shape']}"
            )
        # A private (copy-on-write) mapping of the same file: writes never reach the saved copy,
        # whatever the file's permissions (tensordict maps writable files shared).
        private = torch.from_file(
            str(root / _TENSORS / f"{i}.memmap"), shared=False, size=leaf.numel(), dtype=leaf.dtype
        ).view(leaf.shape)
        if verify and _checksum(private) != info["blake2b"]:
            raise BufferFileError(f"path: leaf {i} of {root} is corrupted (checksum mismatch)")
        leaves.append(private if mmap else private.clone())
    return _decode(meta["spec"], leaves)
