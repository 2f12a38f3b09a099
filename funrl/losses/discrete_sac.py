"""Soft Actor-Critic for discrete actions (Christodoulou 2019, "Soft Actor-Critic for Discrete
Action Settings").

With a finite action set the expectations over ``π`` are exact sums over actions, so neither the
target nor the actor loss samples. The temperature loss is SAC's
(:func:`funrl.losses.sac_temperature_loss`) fed with the expected log-probability.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch import nn

from funrl import nets
from funrl.losses._checks import (
    check_ensemble,
    check_floating,
    check_integer,
    check_min_dim,
    check_nonnegative,
    check_same_shape,
    check_unit_interval,
)
from funrl.losses._objectives import Params, frozen, unpack_transitions
from funrl.losses.bellman import bellman_target, ensemble_critic_loss, ensemble_q

__all__ = [
    "discrete_soft_state_value",
    "discrete_sac_critic_loss",
    "discrete_sac_actor_loss",
    "discrete_sac_target_entropy",
    "discrete_sac_critic_objective",
    "discrete_sac_actor_objective",
]

Scalar = float | torch.Tensor


def _check_logits(name: str, logits: torch.Tensor) -> None:
    check_floating(name, logits)
    check_min_dim(name, logits, 2, "[B, num_actions]")


def discrete_soft_state_value(
    next_q_values: torch.Tensor, next_logits: torch.Tensor, alpha: Scalar
) -> torch.Tensor:
    """``V(s') = sum_a pi(a|s') [min_e Q_e(s', a) - alpha * log pi(a|s')]``.

    Args:
      next_q_values: ``[E, B, num_actions]`` target critic ensemble at ``s'``.
      next_logits: ``[B, num_actions]`` policy logits at ``s'``.
      alpha: temperature >= 0.

    Returns:
      ``[B]`` soft state values.
    """
    _check_logits("next_logits", next_logits)
    check_ensemble("next_q_values", next_q_values, "next_logits", next_logits)
    check_nonnegative("alpha", alpha)
    log_pi = next_logits.log_softmax(dim=-1)
    min_q = next_q_values.min(dim=0).values
    return (log_pi.exp() * (min_q - alpha * log_pi)).sum(dim=-1)


def discrete_sac_critic_loss(
    q_values: torch.Tensor, action: torch.Tensor, target: torch.Tensor, distance: str = "l2"
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Ensemble regression of ``Q_e(s, a_taken)`` onto ``target`` (see ``ensemble_critic_loss``).

    Args:
      q_values: ``[E, B, num_actions]`` critic ensemble at ``s``.
      action: ``[B]`` integer actions taken.
      target: ``[B]`` targets, e.g. ``bellman_target(r, terminated, discrete_soft_state_value(...), gamma)``.
    """
    check_integer("action", action)
    check_floating("target", target)
    check_same_shape("target", target, action=action)
    check_floating("q_values", q_values)
    if q_values.dim() != action.dim() + 2 or q_values.shape[1:-1] != action.shape:
        raise ValueError(
            f"q_values: expected shape [E, {', '.join(map(str, action.shape))}, num_actions], "
            f"got {tuple(q_values.shape)}"
        )
    index = action.unsqueeze(0).unsqueeze(-1).expand(q_values.shape[0], *action.shape, 1)
    taken = q_values.gather(-1, index).squeeze(-1)
    return ensemble_critic_loss(taken, target, distance)


def discrete_sac_actor_loss(
    q_values: torch.Tensor, logits: torch.Tensor, alpha: Scalar
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``mean_b sum_a pi(a|s_b) [alpha * log pi(a|s_b) - min_e Q_e(s_b, a)]``.

    Args:
      q_values: ``[E, B, num_actions]`` critic ensemble at ``s`` (constants: detached here).
      logits: ``[B, num_actions]`` policy logits.
      alpha: temperature (constant).

    Returns:
      ``(loss, metrics)``; metrics: ``entropy`` ``[]`` and ``log_prob`` — the expected
      ``sum_a pi log pi`` per sample ``[B]``, what ``sac_temperature_loss`` takes.
    """
    _check_logits("logits", logits)
    check_ensemble("q_values", q_values, "logits", logits)
    check_nonnegative("alpha", alpha)
    if isinstance(alpha, torch.Tensor):
        alpha = alpha.detach()
    log_pi = logits.log_softmax(dim=-1)
    pi = log_pi.exp()
    min_q = q_values.detach().min(dim=0).values
    loss = (pi * (alpha * log_pi - min_q)).sum(dim=-1).mean()
    expected_log_prob = (pi * log_pi).sum(dim=-1).detach()
    return loss, {"entropy": -expected_log_prob.mean(), "log_prob": expected_log_prob}


def discrete_sac_target_entropy(num_actions: int, scale: float = 0.98) -> float:
    """``scale * log(num_actions)``: a fraction of the maximum entropy (Christodoulou 2019 uses 0.98)."""
    if isinstance(num_actions, bool) or not isinstance(num_actions, int) or num_actions < 2:
        raise ValueError(f"num_actions: expected an int >= 2, got {num_actions!r}")
    check_unit_interval("scale", scale)
    return scale * math.log(num_actions)


def discrete_sac_critic_objective(
    critic_params: Params,
    actor_params: Params,
    target_critic_params: Params,
    alpha: Scalar,
    batch: Mapping[str, torch.Tensor],
    *,
    actor: nn.Module,
    critic: nn.Module,
    gamma: Scalar,
    distance: str = "l2",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Discrete SAC critic loss; ``actor(obs) -> logits``, ``critic(obs) -> [B, num_actions]``.

    Exact expectation over actions, so no key.
    """
    obs, action, reward, next_obs, terminated = unpack_transitions(batch)
    next_logits = nets.apply(actor, frozen(actor_params), next_obs)
    next_q = ensemble_q(critic, frozen(target_critic_params), next_obs)
    next_value = discrete_soft_state_value(next_q, next_logits, alpha)
    target = bellman_target(reward, terminated, next_value, gamma)
    return discrete_sac_critic_loss(ensemble_q(critic, critic_params, obs), action, target, distance)


def discrete_sac_actor_objective(
    actor_params: Params,
    critic_params: Params,
    alpha: Scalar,
    batch: Mapping[str, torch.Tensor],
    *,
    actor: nn.Module,
    critic: nn.Module,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Discrete SAC actor loss; ``metrics["log_prob"]`` is the expected log-prob for the temperature."""
    obs = unpack_transitions(batch)[0]
    q = ensemble_q(critic, frozen(critic_params), obs)
    return discrete_sac_actor_loss(q, nets.apply(actor, actor_params, obs), alpha)
