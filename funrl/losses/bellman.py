"""What the actor-critic losses share: Bellman targets, soft values, the ensemble critic loss.

One small function per equation, rlax style:

- critics come as an ensemble ``q_values[E, B]`` (E critics, B transitions): the twin critic of
  TD3/SAC is ``E = 2``, REDQ's ensemble is ``E = N``, DDPG's single critic is ``E = 1``. Evaluate
  a stacked-params critic once with :func:`ensemble_q` to get it;
- targets are ``[B]``; episode flags (``terminated``) are ``bool`` tensors as environments return
  them, and only ``terminated`` stops bootstrapping (a truncated transition bootstraps from its
  ``final_obs``);
- every loss returns ``(loss, metrics)`` with detached metric tensors (no host sync), so
  ``torch.func.grad_and_value(..., has_aux=True)`` applies directly.

Targets are treated as constants inside the critic losses (``detach``, rlax's ``stop_gradient``),
so a caller may compute them with the same params without leaking gradients into them.

Regression distance: ``"l2"`` is ``(q - y)^2`` without a 1/2 (CleanRL, TorchRL's ``"l2"``),
summed over the ensemble and averaged over the batch. TorchRL's loss modules default to
``"smooth_l1"`` (Huber with delta 1) instead; pass ``distance="smooth_l1"`` to match them.

The algorithms built on these live in :mod:`funrl.losses.td3` (and DDPG),
:mod:`funrl.losses.sac`, :mod:`funrl.losses.discrete_sac`, :mod:`funrl.losses.redq` and
:mod:`funrl.losses.crossq`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from funrl import nets
from funrl.losses._checks import (
    check_bool,
    check_choice,
    check_ensemble,
    check_floating,
    check_same_shape,
    check_scalar_or_broadcastable,
    check_unit_interval,
    check_weight,
)
from funrl.losses._objectives import Params, ensemble_size

__all__ = ["DISTANCES", "bellman_target", "soft_state_value", "ensemble_critic_loss", "ensemble_q"]

Scalar = float | torch.Tensor

DISTANCES = ("l2", "smooth_l1", "l1")


def bellman_target(
    reward: torch.Tensor, terminated: torch.Tensor, next_value: torch.Tensor, gamma: Scalar
) -> torch.Tensor:
    """One-step bootstrapped target ``r + gamma * (1 - terminated) * V(s')``.

    Args:
      reward: ``[B]`` float rewards.
      terminated: ``[B]`` bool; true where ``s'`` is terminal (no bootstrap). Truncation is not
        termination: a truncated transition bootstraps from the value of its ``final_obs``.
      next_value: ``[B]`` float value of the next state (e.g. the clipped double-Q minimum).
      gamma: discount in [0, 1] (a Python float, or a float tensor broadcastable to ``[B]``).

    Returns:
      ``[B]`` targets.
    """
    check_floating("reward", reward)
    check_bool("terminated", terminated)
    check_floating("next_value", next_value)
    check_same_shape("reward", reward, terminated=terminated, next_value=next_value)
    check_unit_interval("gamma", gamma)
    check_scalar_or_broadcastable("gamma", gamma, "reward", reward)
    return reward + gamma * (~terminated).to(reward.dtype) * next_value


def soft_state_value(next_q_values: torch.Tensor, next_log_prob: torch.Tensor, alpha: Scalar) -> torch.Tensor:
    """Soft value of the next state ``min_e Q_e(s', a') - alpha * log pi(a'|s')`` with ``a' ~ pi(s')``.

    Args:
      next_q_values: ``[E, B]`` (target) critic ensemble at the sampled next actions.
      next_log_prob: ``[B]`` log-probabilities of those actions.
      alpha: entropy temperature >= 0 (float, or a float tensor broadcastable to ``[B]``).

    Returns:
      ``[B]`` soft values (SAC, Haarnoja et al. 2018, eq. 3 with clipped double-Q).
    """
    check_floating("next_log_prob", next_log_prob)
    check_ensemble("next_q_values", next_q_values, "next_log_prob", next_log_prob)
    check_weight("alpha", alpha, "next_log_prob", next_log_prob)
    return next_q_values.min(dim=0).values - alpha * next_log_prob


def _distance(prediction: torch.Tensor, target: torch.Tensor, distance: str) -> torch.Tensor:
    """Elementwise regression distance (no reduction)."""
    if distance == "l2":
        return (prediction - target).square()
    if distance == "smooth_l1":
        return F.smooth_l1_loss(prediction, target, reduction="none")
    return (prediction - target).abs()


def ensemble_critic_loss(
    q_values: torch.Tensor, target: torch.Tensor, distance: str = "l2"
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Regression of every critic of an ensemble onto one shared target.

    ``loss = mean_b sum_e distance(Q_e(s_b, a_b), y_b)``, with ``y`` a constant (detached).

    Args:
      q_values: ``[E, B]`` critic ensemble at the replayed actions.
      target: ``[B]`` bootstrapped targets (gradients do not flow into them).
      distance: ``"l2"`` (default), ``"smooth_l1"`` (TorchRL's default) or ``"l1"``.

    Returns:
      ``(loss, metrics)``; metrics: ``q_mean``, ``target_mean``, ``td_error_abs_max`` (per sample,
      max over critics: a priority for prioritised replay, shape ``[B]``).
    """
    check_floating("target", target)
    check_ensemble("q_values", q_values, "target", target)
    check_choice("distance", distance, DISTANCES)
    target = target.detach()
    per_critic = _distance(q_values, target.expand_as(q_values), distance)
    loss = per_critic.sum(dim=0).mean()
    td_error = (q_values - target).detach()
    metrics = {
        "q_mean": q_values.detach().mean(),
        "target_mean": target.mean(),
        "td_error_abs_max": td_error.abs().max(dim=0).values,
    }
    return loss, metrics


def ensemble_q(critic: nn.Module, params: Params, *inputs: torch.Tensor) -> torch.Tensor:
    """All members of a stacked-params critic ensemble on the same inputs, with one ``vmap``.

    Returns ``[E, *critic_output_shape]``, e.g. ``[E, B]`` for ``funrl.nets.ContinuousQ`` and
    ``[E, B, num_actions]`` for a discrete Q-network.
    """
    ensemble_size("params", params)
    in_dims = (None, 0) + (None,) * len(inputs)
    return torch.func.vmap(nets.apply, in_dims=in_dims, randomness="error")(critic, params, *inputs)
