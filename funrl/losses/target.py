"""Target networks as pure functions on params pytrees.

A target network is just a second params pytree. These functions return a new target pytree and
never modify their inputs, so they compose with ``torch.func.vmap`` (e.g. over seeds, or over a
sweep of ``tau``) and with ``torch.compile``:

- ``polyak(target, online, tau)`` — soft update ``target + tau * (online - target)``
  (DDPG, Lillicrap et al. 2016; TD3; SAC). TorchRL's ``SoftUpdate(eps=...)`` uses ``eps = 1 - tau``.
- ``hard_update(target, online)`` — copy (DQN, Mnih et al. 2015).
- ``periodic_update(target, online, step, period)`` — copy every ``period`` steps, branch-free
  (optax's ``periodic_update``), so a compiled train step needs no Python ``if`` on the step.
"""

from __future__ import annotations

from typing import Any

import torch

from funrl import tree
from funrl.losses._checks import check_unit_interval

__all__ = ["polyak", "hard_update", "periodic_update"]

Params = Any


def _check_pair(target: Params, online: Params, floating: bool) -> None:
    """``target`` and ``online`` must be pytrees of tensors with equal structure, shapes and dtypes."""
    tree.check_same_structure(target, online, name="target")
    target_leaves, online_leaves = tree.leaves(target), tree.leaves(online)
    for i, (t, o) in enumerate(zip(target_leaves, online_leaves, strict=True)):
        if not isinstance(t, torch.Tensor) or not isinstance(o, torch.Tensor):
            raise ValueError(
                f"target and online: expected pytrees of tensors, got leaf {i} of types "
                f"{type(t).__name__} and {type(o).__name__}"
            )
        if t.shape != o.shape:
            raise ValueError(
                f"target: leaf {i} has shape {tuple(t.shape)}, expected the online shape {tuple(o.shape)}"
            )
        if t.dtype != o.dtype:
            raise ValueError(f"target: leaf {i} has dtype {t.dtype}, expected the online dtype {o.dtype}")
        if floating and not t.is_floating_point():
            raise ValueError(f"target: leaf {i} must be a floating-point tensor, got dtype {t.dtype}")


def _check_tau(tau: float | torch.Tensor) -> None:
    """A Python ``tau`` must lie in [0, 1]; a tensor must be a 0-d float (values unchecked: no sync)."""
    check_unit_interval("tau", tau)
    if isinstance(tau, torch.Tensor) and tau.dim() != 0:
        raise ValueError(f"tau: expected a scalar tensor, got shape {tuple(tau.shape)}")


def polyak(target: Params, online: Params, tau: float | torch.Tensor) -> Params:
    """Soft (Polyak) target update: ``target + tau * (online - target)``, leaf by leaf.

    Args:
      target: params pytree of the target network.
      online: params pytree of the online network, same structure and shapes.
      tau: step size in [0, 1] (a Python float, or a 0-d float tensor so that it can be vmapped);
        ``tau = 1`` returns ``online`` exactly, ``tau = 0`` returns ``target`` exactly.

    Returns:
      The new target pytree (new tensors; the inputs are not modified).
    """
    _check_tau(tau)
    _check_pair(target, online, floating=True)
    # torch.lerp is exact at both ends (weight 0 -> start, weight 1 -> end), unlike t + tau * (o - t).
    return tree.map(
        lambda t, o: torch.lerp(t, o, torch.as_tensor(tau, dtype=t.dtype, device=t.device)), target, online
    )


def hard_update(target: Params, online: Params) -> Params:
    """Hard target update: returns a copy of ``online`` (new tensors, not aliases of ``online``).

    ``target`` is only checked for matching structure, shapes and dtypes.
    """
    _check_pair(target, online, floating=False)
    return tree.map(torch.clone, online)


def periodic_update(target: Params, online: Params, step: int | torch.Tensor, period: int) -> Params:
    """Copies ``online`` into the target when ``step % period == 0``, else keeps ``target``.

    Branch-free (``torch.where``), so ``step`` may be a tensor inside a compiled or vmapped step.

    Args:
      target: pytree kept when the step is off-period (e.g. target params, or the old actor params
        and optimiser state for TD3's delayed actor update).
      online: pytree taken on the period, same structure, shapes and dtypes (any dtypes).
      step: the current step (Python int or integer tensor, scalar or batched under vmap).
      period: a positive Python int.
    """
    if isinstance(period, bool) or not isinstance(period, int) or period < 1:
        raise ValueError(f"period: expected a positive int, got {period!r}")
    if isinstance(step, torch.Tensor):
        if step.dim() != 0:
            raise ValueError(f"step: expected a scalar, got shape {tuple(step.shape)}")
        if step.is_floating_point() or step.dtype == torch.bool:
            raise ValueError(f"step: expected an integer tensor, got dtype {step.dtype}")
    elif isinstance(step, bool) or not isinstance(step, int):
        raise ValueError(f"step: expected an int or an integer tensor, got {type(step).__name__}")
    _check_pair(target, online, floating=False)
    copy_now = torch.as_tensor(step) % period == 0
    return tree.map(lambda t, o: torch.where(copy_now, o, t), target, online)
