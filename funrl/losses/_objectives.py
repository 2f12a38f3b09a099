"""What the parameter-level objectives share: the replay batch, frozen params, policy samples.

An objective is ``(params, ..., batch, key, *, modules..., hyper-parameters) -> (loss, metrics)``
with the params being trained first, so ``torch.func.grad_and_value(objective, has_aux=True)``
gives their gradient. Modules are ``funrl.nets`` skeletons passed by keyword (static:
``torch.compile`` specialises on them). Critics of SAC/TD3/REDQ/CrossQ/discrete SAC are *stacked*
params (leading dim E, from ``funrl.nets.init_ensemble`` or ``funrl.tree.stack``) evaluated with
one ``vmap`` (:func:`funrl.losses.ensemble_q`).

``batch`` is a mapping (a dict, or a TensorDict) with ``obs [B, ...]``, ``action [B, A]`` (int
``[B]`` for discrete SAC), ``reward [B]``, ``next_obs [B, ...]`` and bool ``terminated [B]``.
``next_obs`` of a truncated transition is its ``final_obs``. Stochastic policies are tanh-squashed
Gaussians (``funrl.nets.distributions.tanh_normal``, actions in (-1, 1)): actors return
``(loc, scale)`` (e.g. ``funrl.nets.GaussianActor(..., state_dependent_std=True)``); deterministic
actors (DDPG/TD3) return actions already within the action bounds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from funrl import nets, tree

Params = Any

TRANSITION_KEYS = ("obs", "action", "reward", "next_obs", "terminated")


def unpack_transitions(batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """``(obs, action, reward, next_obs, terminated)`` of a replay batch."""
    missing = [k for k in TRANSITION_KEYS if k not in batch.keys()]
    if missing:
        raise ValueError(f"batch: expected entries {TRANSITION_KEYS}, missing {missing}")
    return tuple(batch[k] for k in TRANSITION_KEYS)


def frozen(params: Params) -> Params:
    """``params`` detached: a network evaluated with them passes no gradient to them."""
    return tree.map(torch.Tensor.detach, params)


def ensemble_size(name: str, params: Params) -> int:
    """E, the leading size shared by every leaf of stacked ensemble params."""
    sizes = {leaf.shape[0] if leaf.dim() > 0 else None for leaf in tree.leaves(params)}
    if len(sizes) != 1 or None in sizes:
        raise ValueError(f"{name}: expected stacked ensemble params with one leading size, got sizes {sizes}")
    return sizes.pop()


PolicySampler = Callable[[nn.Module, Params, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
"""``sample(actor, actor_params, obs, key) -> (a, log π(a|s))``: how an objective draws actions."""


def sample_policy(
    actor: nn.Module, actor_params: Params, obs: torch.Tensor, key: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(a, log π(a|s))`` with ``a`` drawn from the actor's tanh-Gaussian at ``obs``."""
    loc, scale = nets.apply(actor, actor_params, obs)
    return nets.distributions.tanh_normal.sample_and_log_prob(key, loc, scale)
