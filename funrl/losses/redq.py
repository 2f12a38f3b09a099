"""Randomized Ensembled Double Q-learning (Chen et al. 2021, REDQ).

An ensemble of N critics, all regressed onto one target built from the minimum over a random
subset of M target critics (Alg. 2, line 7); the actor maximises the ensemble *mean* (line 12).
Shared pieces are in :mod:`funrl.losses.bellman`; the parameter-level objectives' conventions
in :mod:`funrl.losses._objectives`.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from funrl import random, tree
from funrl.losses._checks import check_ensemble, check_floating, check_integer, check_weight
from funrl.losses._objectives import Params, ensemble_size, frozen, sample_policy, unpack_transitions
from funrl.losses.bellman import bellman_target, ensemble_critic_loss, ensemble_q, soft_state_value

__all__ = [
    "redq_subset",
    "redq_target_value",
    "redq_actor_loss",
    "redq_critic_objective",
    "redq_actor_objective",
]

Scalar = float | torch.Tensor


def redq_subset(key: torch.Tensor, num_critics: int, subset_size: int) -> torch.Tensor:
    """``subset_size`` distinct critic indices out of ``num_critics``, drawn uniformly (``[M]`` int64)."""
    if isinstance(num_critics, bool) or not isinstance(num_critics, int) or num_critics < 1:
        raise ValueError(f"num_critics: expected a positive int, got {num_critics!r}")
    if isinstance(subset_size, bool) or not isinstance(subset_size, int) or not 1 <= subset_size <= num_critics:
        raise ValueError(
            f"subset_size: expected an int in [1, num_critics={num_critics}], got {subset_size!r}"
        )
    return random.permutation(key, num_critics)[:subset_size]


def redq_target_value(
    next_q_values: torch.Tensor, subset: torch.Tensor, next_log_prob: torch.Tensor, alpha: Scalar
) -> torch.Tensor:
    """``min_{e in subset} Q_e(s', a') - alpha * log pi(a'|s')`` (Chen et al. 2021, Alg. 2, line 7).

    Args:
      next_q_values: ``[N, B]`` target critic ensemble at sampled next actions.
      subset: ``[M]`` int64 critic indices (``redq_subset``).
      next_log_prob: ``[B]``.
      alpha: temperature >= 0 (0 gives the deterministic-policy variant).
    """
    check_integer("subset", subset)
    if subset.dim() != 1 or subset.shape[0] < 1:
        raise ValueError(f"subset: expected a non-empty [M] index tensor, got shape {tuple(subset.shape)}")
    check_ensemble("next_q_values", next_q_values, "next_log_prob", next_log_prob)
    return soft_state_value(next_q_values.index_select(0, subset), next_log_prob, alpha)


def redq_actor_loss(
    q_values: torch.Tensor, log_prob: torch.Tensor, alpha: Scalar
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """REDQ policy loss ``mean_b [alpha * log pi(a_b|s_b) - mean_e Q_e(s_b, a_b)]`` over all N critics.

    Chen et al. 2021, Alg. 2, line 12 (the ensemble *mean*, where SAC takes the minimum of two).
    """
    check_floating("log_prob", log_prob)
    check_ensemble("q_values", q_values, "log_prob", log_prob)
    check_weight("alpha", alpha, "log_prob", log_prob)
    if isinstance(alpha, torch.Tensor):
        alpha = alpha.detach()
    mean_q = q_values.mean(dim=0)
    loss = (alpha * log_prob - mean_q).mean()
    return loss, {"entropy": -log_prob.detach().mean(), "q_actor_mean": mean_q.detach().mean()}


def redq_critic_objective(
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
    subset_size: int = 2,
    distance: str = "l2",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """REDQ critic loss: all N critics regress onto a target from a random subset of M target critics.

    Only the M drawn target critics are evaluated (their params are gathered first).
    ``metrics["subset"]`` holds the drawn indices.
    """
    obs, action, reward, next_obs, terminated = unpack_transitions(batch)
    num_critics = ensemble_size("critic_params", critic_params)
    subset_key, action_key = random.split(key)
    subset = redq_subset(subset_key, num_critics, subset_size)
    next_action, next_log_prob = sample_policy(actor, frozen(actor_params), next_obs, action_key)
    subset_params = tree.map(lambda p: p.index_select(0, subset), frozen(target_critic_params))
    next_q = ensemble_q(critic, subset_params, next_obs, next_action)
    target = bellman_target(reward, terminated, soft_state_value(next_q, next_log_prob, alpha), gamma)
    loss, metrics = ensemble_critic_loss(ensemble_q(critic, critic_params, obs, action), target, distance)
    return loss, {**metrics, "subset": subset}


def redq_actor_objective(
    actor_params: Params,
    critic_params: Params,
    alpha: Scalar,
    batch: Mapping[str, torch.Tensor],
    key: torch.Tensor,
    *,
    actor: nn.Module,
    critic: nn.Module,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """REDQ actor loss (ensemble mean over all N critics), with ``metrics["log_prob"]``."""
    obs = unpack_transitions(batch)[0]
    action, log_prob = sample_policy(actor, actor_params, obs, key)
    loss, metrics = redq_actor_loss(ensemble_q(critic, frozen(critic_params), obs, action), log_prob, alpha)
    return loss, {**metrics, "log_prob": log_prob.detach()}
