"""Soft Actor-Critic with a learned temperature (Haarnoja et al. 2018, "Soft Actor-Critic
Algorithms and Applications").

The critics regress onto ``r + γ (1 - d) [min_e Q'_e(s', a') - α log π(a'|s')]`` with
``a' ~ π(s')``; the actor minimises ``α log π(a|s) - min_e Q_e(s, a)``; the temperature ``α``
follows the policy's entropy towards a target. Shared pieces are in :mod:`funrl.losses.bellman`;
the parameter-level objectives' conventions in :mod:`funrl.losses._objectives`.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from funrl.losses._checks import check_ensemble, check_floating, check_shape, check_weight
from funrl.losses._objectives import Params, PolicySampler, frozen, sample_policy, unpack_transitions
from funrl.losses.bellman import bellman_target, ensemble_critic_loss, ensemble_q, soft_state_value

__all__ = [
    "sac_target_entropy",
    "sac_critic_loss",
    "sac_actor_loss",
    "sac_temperature_loss",
    "sac_critic_objective",
    "sac_actor_objective",
]

Scalar = float | torch.Tensor


def sac_target_entropy(action_dim: int) -> float:
    """The usual target entropy ``-dim(A)`` (Haarnoja et al. 2018b; TorchRL's ``"auto"``)."""
    if isinstance(action_dim, bool) or not isinstance(action_dim, int) or action_dim < 1:
        raise ValueError(f"action_dim: expected a positive int, got {action_dim!r}")
    return -float(action_dim)


sac_critic_loss = ensemble_critic_loss


def sac_actor_loss(
    q_values: torch.Tensor, log_prob: torch.Tensor, alpha: Scalar
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """SAC policy loss ``mean_b [alpha * log pi(a_b|s_b) - min_e Q_e(s_b, a_b)]``, ``a_b ~ pi(s_b)``.

    Args:
      q_values: ``[E, B]`` critic ensemble at reparameterised policy samples (critic params
        detached, so only the actor receives gradients).
      log_prob: ``[B]`` log-probabilities of those samples.
      alpha: temperature (a constant here: a tensor is detached).

    Returns:
      ``(loss, metrics)``; metrics: ``entropy`` (``-mean log_prob``), ``q_actor_mean``.
    """
    check_floating("log_prob", log_prob)
    check_ensemble("q_values", q_values, "log_prob", log_prob)
    check_weight("alpha", alpha, "log_prob", log_prob)
    if isinstance(alpha, torch.Tensor):
        alpha = alpha.detach()
    min_q = q_values.min(dim=0).values
    loss = (alpha * log_prob - min_q).mean()
    return loss, {"entropy": -log_prob.detach().mean(), "q_actor_mean": min_q.detach().mean()}


def sac_temperature_loss(
    log_alpha: torch.Tensor, log_prob: torch.Tensor, target_entropy: Scalar
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Temperature loss ``mean_b [-log_alpha * (log pi(a_b|s_b) + target_entropy)]``.

    Its gradient raises alpha when the policy entropy ``-E[log pi]`` is below the target, and
    lowers it when above. Parameterised by ``log_alpha`` (as TorchRL and CleanRL do) so alpha
    stays positive; ``log_prob`` is a constant here.

    Args:
      log_alpha: 0-d float tensor, the learned parameter.
      log_prob: ``[B]`` log-probabilities of policy samples.
      target_entropy: target entropy (e.g. ``sac_target_entropy(action_dim)``).

    Returns:
      ``(loss, metrics)``; metrics: ``alpha``.
    """
    check_floating("log_alpha", log_alpha)
    check_shape("log_alpha", log_alpha, (), "a scalar")
    check_floating("log_prob", log_prob)
    if isinstance(target_entropy, bool) or not isinstance(target_entropy, (int, float, torch.Tensor)):
        raise ValueError(f"target_entropy: expected a float, got {type(target_entropy).__name__}")
    loss = (-log_alpha * (log_prob.detach() + target_entropy)).mean()
    return loss, {"alpha": log_alpha.detach().exp()}


def sac_critic_objective(
    critic_params: Params,
    actor_params: Params,
    target_critic_params: Params,
    alpha: Scalar,
    batch: Mapping[str, torch.Tensor],
    key: torch.Tensor,
    *,
    actor: nn.Module,
    critic: nn.Module,
    gamma: Scalar,
    distance: str = "l2",
    sample: PolicySampler = sample_policy,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """SAC critic loss from params: target ``r + gamma (1 - d) [min_e Q'_e(s', a') - alpha log pi(a'|s')]``.

    ``a' ~ pi(s')`` is drawn as ``sample(actor, actor_params, next_obs, key)`` (by default one
    draw for the batch with ``key``; an agent may pass a sampler that draws each row with its own
    key). Returns ``sac_critic_loss``'s ``(loss, metrics)``.
    """
    obs, action, reward, next_obs, terminated = unpack_transitions(batch)
    next_action, next_log_prob = sample(actor, frozen(actor_params), next_obs, key)
    next_q = ensemble_q(critic, frozen(target_critic_params), next_obs, next_action)
    next_value = soft_state_value(next_q, next_log_prob, alpha)
    target = bellman_target(reward, terminated, next_value, gamma)
    q = ensemble_q(critic, critic_params, obs, action)
    return sac_critic_loss(q, target, distance)


def sac_actor_objective(
    actor_params: Params,
    critic_params: Params,
    alpha: Scalar,
    batch: Mapping[str, torch.Tensor],
    key: torch.Tensor,
    *,
    actor: nn.Module,
    critic: nn.Module,
    sample: PolicySampler = sample_policy,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """SAC actor loss from params (critics detached), ``a ~ pi(s)`` drawn as
    ``sample(actor, actor_params, obs, key)`` (see :func:`sac_critic_objective`).
    ``metrics["log_prob"]`` ``[B]`` feeds ``sac_temperature_loss``, so the temperature step needs
    no second actor pass."""
    obs = unpack_transitions(batch)[0]
    action, log_prob = sample(actor, actor_params, obs, key)
    q = ensemble_q(critic, frozen(critic_params), obs, action)
    loss, metrics = sac_actor_loss(q, log_prob, alpha)
    return loss, {**metrics, "log_prob": log_prob.detach()}
