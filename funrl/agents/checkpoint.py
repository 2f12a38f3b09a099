"""Checkpoints that load without executing code, written atomically.

A checkpoint is one ``torch.save`` file holding only tensors, strings and ints (so
``torch.load(weights_only=True)`` reads it): the flattened leaves of a train state, the printed
tree structure they came from (checked on load against the caller's template), a format tag and
free-form JSON metadata. The structure is rebuilt from the template the agent makes itself, so
nothing in the file is ever unpickled into code.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from funrl import tree

__all__ = ["save_checkpoint", "load_checkpoint", "atomic_write_bytes", "CheckpointError"]

FORMAT = "funrl-checkpoint-v1"


class CheckpointError(ValueError):
    """A checkpoint file that is missing, corrupted, foreign or made for another structure."""


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike, write: Any) -> None:
    """Write a file atomically: ``write(fileobj)`` into a temp file beside ``path``, then rename.

    A crash at any point leaves either the old file or the new one, never a partial one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def save_checkpoint(path: str | os.PathLike, state: Any, metadata: dict[str, Any]) -> None:
    """Save the pytree ``state`` (tensor leaves) and JSON-able ``metadata`` to ``path`` atomically."""
    leaves = tree.leaves(state)
    for i, leaf in enumerate(leaves):
        if not isinstance(leaf, torch.Tensor):
            raise TypeError(f"state: expected tensor leaves, got {type(leaf).__name__} at leaf {i}")
    payload = {
        "format": FORMAT,
        "structure": str(tree.structure(state)),
        "leaves": [leaf.detach().cpu().contiguous() for leaf in leaves],
        "metadata": json.dumps(metadata, sort_keys=True),
    }
    atomic_write_bytes(path, lambda f: torch.save(payload, f))


def load_checkpoint(
    path: str | os.PathLike, template: Any, device: torch.device | str | None = None
) -> tuple[Any, dict[str, Any]]:
    """Load a checkpoint saved from a state shaped like ``template``; returns ``(state, metadata)``.

    Raises:
        CheckpointError: the file is missing, truncated, corrupted, not a funrl checkpoint, or
            holds a different tree structure or leaf shapes than ``template``.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"path: no checkpoint file at {path}")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises several types for truncated or foreign files
        raise CheckpointError(
            f"path: {path} is not a readable checkpoint (corrupted or truncated?): {exc}"
        ) from exc
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"path: {path} is not a {FORMAT} file")
    expected = str(tree.structure(template))
    if payload.get("structure") != expected:
        raise CheckpointError(
            f"path: {path} holds a state of structure {payload.get('structure')}, expected {expected}"
        )
    template_leaves = tree.leaves(template)
    leaves = payload["leaves"]
    if len(leaves) != len(template_leaves):
        raise CheckpointError(f"path: {path} holds {len(leaves)} leaves, expected {len(template_leaves)}")
    for i, (got, want) in enumerate(zip(leaves, template_leaves, strict=True)):
        if got.shape != want.shape or got.dtype != want.dtype:
            raise CheckpointError(
                f"path: {path} leaf {i} has shape {list(got.shape)} {got.dtype}, "
                f"expected {list(want.shape)} {want.dtype}"
            )
    target = device if device is not None else template_leaves[0].device if template_leaves else None
    state = tree.unflatten(tree.structure(template), [leaf.to(target) for leaf in leaves])
    return state, json.loads(payload["metadata"])
