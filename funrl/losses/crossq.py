"""CrossQ (Bhatt et al. 2024): SAC without target networks, with batch-normalised critics.

The critics see ``(s, a)`` and ``(s', a' ~ π(s'))`` in one joint batch, so batch normalisation
normalises both with the same statistics, and the ``s'`` half of that forward pass gives the
(detached) soft Bellman target in place of a target network. The actor loss is SAC's, with the
critics in eval mode. Shared pieces are in :mod:`funrl.losses.bellman`; the parameter-level
objectives' conventions in :mod:`funrl.losses._objectives`.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from funrl import tree
from funrl.losses._objectives import Params, frozen, sample_policy, unpack_transitions
from funrl.losses.bellman import bellman_target, ensemble_critic_loss, ensemble_q, soft_state_value
from funrl.losses.sac import sac_actor_loss

__all__ = ["crossq_target", "crossq_critic_objective", "crossq_actor_objective"]

Scalar = float | torch.Tensor


def crossq_target(
    reward: torch.Tensor,
    terminated: torch.Tensor,
    next_q_values: torch.Tensor,
    next_log_prob: torch.Tensor,
    gamma: Scalar,
    alpha: Scalar,
) -> torch.Tensor:
    """Soft Bellman target from the *online* critic's next-state values (Bhatt et al. 2024).

    ``next_q_values`` is the ``s'`` half of the joint ``(s, a), (s', a')`` forward pass. The
    target is detached (it stands in for the removed target network).

    Args:
      reward, terminated: ``[B]``.
      next_q_values: ``[E, B]`` online critics at ``(s', a' ~ pi(s'))``.
      next_log_prob: ``[B]``.
      gamma: discount; alpha: temperature.
    """
    next_value = soft_state_value(next_q_values, next_log_prob, alpha)
    return bellman_target(reward, terminated, next_value, gamma).detach()


def _check_mode(critic: nn.Module, training: bool, use: str) -> None:
    if critic.training != training:
        mode = "training" if training else "eval"
        raise ValueError(
            f"critic: expected a skeleton in {mode} mode for the {use} (call .train({training}) on a "
            f"skeleton of its own), got one in {'training' if critic.training else 'eval'} mode"
        )


def crossq_critic_objective(
    critic_params: Params,
    critic_buffers: Params,
    actor_params: Params,
    alpha: Scalar,
    batch: Mapping[str, torch.Tensor],
    key: torch.Tensor,
    *,
    actor: nn.Module,
    critic: nn.Module,
    gamma: Scalar,
    distance: str = "l2",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """CrossQ critic loss: a batch-norm critic ensemble, no target network.

    ``critic`` must be a skeleton in training mode.

    Args:
      critic_params: stacked critic parameters ``[E, ...]``.
      critic_buffers: stacked batch-norm buffers ``[E, ...]`` (``funrl.nets.init_buffers`` stacked).
        They are not modified: the updated running statistics come back as
        ``metrics["critic_buffers"]``; carry those forward.
    """
    _check_mode(critic, True, "critic loss")
    obs, action, reward, next_obs, terminated = unpack_transitions(batch)
    next_action, next_log_prob = sample_policy(actor, frozen(actor_params), next_obs, key)
    # Batch norm updates running statistics in place: work on copies so the inputs stay untouched.
    buffers = tree.map(torch.clone, critic_buffers)
    joint_q = ensemble_q(
        critic, {**critic_params, **buffers}, torch.cat([obs, next_obs]), torch.cat([action, next_action])
    )
    q, next_q = joint_q.split(obs.shape[0], dim=1)
    target = crossq_target(reward, terminated, next_q, next_log_prob, gamma, alpha)
    loss, metrics = ensemble_critic_loss(q, target, distance)
    return loss, {**metrics, "critic_buffers": frozen(buffers)}


def crossq_actor_objective(
    actor_params: Params,
    critic_params: Params,
    critic_buffers: Params,
    alpha: Scalar,
    batch: Mapping[str, torch.Tensor],
    key: torch.Tensor,
    *,
    actor: nn.Module,
    critic: nn.Module,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """CrossQ actor loss: SAC's, with the critics in eval mode (running statistics), as TorchRL does.

    ``critic`` must be a skeleton in eval mode (a second skeleton of the same critic class).
    """
    _check_mode(critic, False, "actor loss")
    obs = unpack_transitions(batch)[0]
    action, log_prob = sample_policy(actor, actor_params, obs, key)
    q = ensemble_q(critic, {**frozen(critic_params), **critic_buffers}, obs, action)
    loss, metrics = sac_actor_loss(q, log_prob, alpha)
    return loss, {**metrics, "log_prob": log_prob.detach()}
