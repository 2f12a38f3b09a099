"""Moving items between funrl buffers and TorchRL: TensorDicts with TorchRL's key conventions.

funrl items are flat dicts (``obs``, ``action``, ``reward``, ``done``, ``terminated``,
``truncated``, ``next_obs``, ...); TorchRL stores a transition as a TensorDict with
``observation``, ``action`` at the root and the step's outcome under ``"next"``:
``("next", "observation")``, ``("next", "reward")``, ``("next", "done")``,
``("next", "terminated")``, ``("next", "truncated")``, where reward and flags carry a trailing
dim of 1 (``[B, 1]``; TorchRL's reward/done specs are shaped ``(1,)``). ``to_tensordict`` and
``from_tensordict`` map between the two; keys outside the mapping pass through unchanged (a
nested dict becomes a nested TensorDict and back).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from tensordict import TensorDict, TensorDictBase

__all__ = ["TORCHRL_KEYS", "to_tensordict", "from_tensordict"]

TORCHRL_KEYS: dict[str, str | tuple[str, ...]] = {
    "obs": "observation",
    "action": "action",
    "reward": ("next", "reward"),
    "done": ("next", "done"),
    "terminated": ("next", "terminated"),
    "truncated": ("next", "truncated"),
    "next_obs": ("next", "observation"),
}
"""funrl item key -> TorchRL TensorDict key."""

_TRAILING_ONE = {"reward", "done", "terminated", "truncated"}


def _check_items(items: Any, name: str) -> None:
    if not isinstance(items, Mapping):
        raise TypeError(
            f"{name}: expected a dict of tensors (a buffer item batch), got {type(items).__name__}"
        )


def to_tensordict(
    items: Mapping[str, Any], batch_dims: int = 1, keys: Mapping[str, str | tuple[str, ...]] = TORCHRL_KEYS
) -> TensorDict:
    """A TensorDict of ``items`` under TorchRL keys, with batch size the first ``batch_dims`` dims.

    ``reward`` / ``done`` / ``terminated`` / ``truncated`` of shape ``[*batch]`` gain a trailing
    dim of 1, as TorchRL stores them.
    """
    _check_items(items, "items")
    from tensordict import TensorDict  # on first use: importing tensordict patches torch.func.vmap

    out = TensorDict({}, batch_size=[])
    batch: list[int] | None = None
    for name, value in items.items():
        if isinstance(value, Mapping):
            value = to_tensordict(value, batch_dims, keys={})
        elif not isinstance(value, torch.Tensor):
            raise TypeError(f"items: leaf {name!r} expected a torch.Tensor, got {type(value).__name__}")
        elif name in _TRAILING_ONE and name in keys and value.dim() == batch_dims:
            value = value.unsqueeze(-1)
        if value.dim() < batch_dims:
            raise ValueError(
                f"items: leaf {name!r} expected at least {batch_dims} batch dims, got {list(value.shape)}"
            )
        if batch is None:
            batch = list(value.shape[:batch_dims])
        elif list(value.shape[:batch_dims]) != batch:
            raise ValueError(
                f"items: leaf {name!r} has batch dims {list(value.shape[:batch_dims])}, others {batch}"
            )
        out.set(keys.get(name, name), value)
    out.batch_size = batch or []
    return out


def from_tensordict(
    td: TensorDictBase, keys: Mapping[str, str | tuple[str, ...]] = TORCHRL_KEYS
) -> dict[str, Any]:
    """The funrl item dict of a TorchRL-keyed TensorDict (the inverse of :func:`to_tensordict`).

    Mapped keys are looked up where TorchRL puts them; every other leaf is kept under its own key
    (nested keys other than the mapped ones stay nested dicts). Reward and flags lose their
    trailing dim of 1.
    """
    from tensordict import TensorDictBase  # on first use: importing tensordict patches torch.func.vmap

    if not isinstance(td, TensorDictBase):
        raise TypeError(f"td: expected a TensorDict, got {type(td).__name__}")
    batch_dims = td.batch_dims
    out: dict[str, Any] = {}
    taken = set()
    for name, key in keys.items():
        if key in td.keys(include_nested=True, leaves_only=True):
            value = td.get(key)
            if name in _TRAILING_ONE and value.dim() == batch_dims + 1 and value.shape[-1] == 1:
                value = value.squeeze(-1)
            out[name] = value
            taken.add(key if isinstance(key, tuple) else (key,))
    for key in td.keys(include_nested=True, leaves_only=True):
        path = key if isinstance(key, tuple) else (key,)
        if path in taken:
            continue
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = td.get(key)
    return out
