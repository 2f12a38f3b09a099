"""Deterministic actor-critic losses: DDPG (Lillicrap et al. 2016) and TD3 (Fujimoto et al. 2018).

DDPG regresses one critic onto ``r + γ (1 - d) Q'(s', μ'(s'))`` and moves the actor up the
critic. TD3 adds three fixes: clipped double-Q (the minimum of two target critics), target policy
smoothing (clipped noise on the target action) and a delayed actor update (the caller's: see
:func:`td3_critic_objective`). Shared pieces are in :mod:`funrl.losses.bellman`; the
parameter-level objectives' conventions in :mod:`funrl.losses._objectives`.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from funrl import nets, random, tree
from funrl.losses._checks import (
    check_floating,
    check_min_dim,
    check_nonnegative,
    check_same_shape,
    check_scalar_or_broadcastable,
)
from funrl.losses._objectives import Params, ensemble_size, frozen, unpack_transitions
from funrl.losses.bellman import bellman_target, ensemble_critic_loss, ensemble_q

__all__ = [
    "ddpg_critic_loss",
    "ddpg_actor_loss",
    "td3_critic_loss",
    "td3_actor_loss",
    "td3_smoothing_noise",
    "smoothed_target_action",
    "ddpg_critic_objective",
    "ddpg_actor_objective",
    "td3_critic_objective",
    "td3_actor_objective",
]

Scalar = float | torch.Tensor

ddpg_critic_loss = ensemble_critic_loss
td3_critic_loss = ensemble_critic_loss


def ddpg_actor_loss(q_value: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Deterministic policy gradient loss ``-mean_b Q(s_b, mu(s_b))`` (DDPG; TD3 uses critic 1).

    Args:
      q_value: ``[B]`` one critic at the policy's actions. Gradients should reach the actor only:
        evaluate the critic with detached params.
    """
    check_floating("q_value", q_value)
    check_min_dim("q_value", q_value, 1, "[B]")
    return -q_value.mean(), {"q_actor_mean": q_value.detach().mean()}


td3_actor_loss = ddpg_actor_loss


def td3_smoothing_noise(
    key: torch.Tensor,
    shape: tuple[int, ...],
    policy_noise: Scalar,
    noise_clip: Scalar,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """TD3 target policy smoothing noise ``clip(N(0, policy_noise^2), -noise_clip, noise_clip)``.

    Fujimoto et al. 2018, eq. 14 (defaults there: ``policy_noise = 0.2``, ``noise_clip = 0.5``, in
    units of the action scale). Both may be floats or 0-d tensors.
    """
    check_nonnegative("policy_noise", policy_noise)
    check_nonnegative("noise_clip", noise_clip)
    noise = random.normal(key, shape, dtype=dtype) * policy_noise
    return noise.clamp(-noise_clip, noise_clip)


def smoothed_target_action(
    next_action: torch.Tensor,
    noise: torch.Tensor,
    action_low: Scalar,
    action_high: Scalar,
) -> torch.Tensor:
    """``clip(mu'(s') + noise, low, high)``: the target policy's action with smoothing noise.

    Args:
      next_action: ``[B, A]`` target policy actions at ``s'``.
      noise: ``[B, A]`` clipped noise (``td3_smoothing_noise``).
      action_low, action_high: action bounds (floats, or tensors broadcastable to ``[B, A]``).
    """
    check_floating("next_action", next_action)
    check_floating("noise", noise)
    check_same_shape("next_action", next_action, noise=noise)
    for name, bound in (("action_low", action_low), ("action_high", action_high)):
        if isinstance(bound, torch.Tensor):
            check_floating(name, bound)
            check_scalar_or_broadcastable(name, bound, "next_action", next_action)
        elif isinstance(bound, bool) or not isinstance(bound, (int, float)):
            raise ValueError(f"{name}: expected a float or a float tensor, got {type(bound).__name__}")
    if not isinstance(action_low, torch.Tensor) and not isinstance(action_high, torch.Tensor):
        if action_low > action_high:
            raise ValueError(f"action_low: expected <= action_high ({action_high}), got {action_low}")
    return torch.clamp(next_action.detach() + noise, action_low, action_high)


def td3_critic_objective(
    critic_params: Params,
    target_actor_params: Params,
    target_critic_params: Params,
    batch: Mapping[str, torch.Tensor],
    key: torch.Tensor,
    *,
    actor: nn.Module,
    critic: nn.Module,
    gamma: Scalar,
    policy_noise: Scalar = 0.2,
    noise_clip: Scalar = 0.5,
    action_low: Scalar = -1.0,
    action_high: Scalar = 1.0,
    distance: str = "l2",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """TD3 critic loss: clipped double-Q target at the smoothed target action (Fujimoto et al. 2018).

    ``y = r + gamma (1 - d) min_e Q'_e(s', clip(mu'(s') + clip(eps, -c, c), low, high))``. The delayed
    actor update is the caller's: step the actor every ``policy_delay`` critic steps, e.g. with
    ``funrl.losses.periodic_update((actor_params, opt_state), (new_params, new_opt_state), step,
    policy_delay)``, which stays branch-free in a compiled step.
    """
    obs, action, reward, next_obs, terminated = unpack_transitions(batch)
    next_action = nets.apply(actor, frozen(target_actor_params), next_obs)
    noise = td3_smoothing_noise(key, tuple(next_action.shape), policy_noise, noise_clip, next_action.dtype)
    next_action = smoothed_target_action(next_action, noise, action_low, action_high)
    next_q = ensemble_q(critic, frozen(target_critic_params), next_obs, next_action)
    target = bellman_target(reward, terminated, next_q.min(dim=0).values, gamma)
    q = ensemble_q(critic, critic_params, obs, action)
    return td3_critic_loss(q, target, distance)


def td3_actor_objective(
    actor_params: Params,
    critic_params: Params,
    batch: Mapping[str, torch.Tensor],
    *,
    actor: nn.Module,
    critic: nn.Module,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """TD3 actor loss ``-mean Q_1(s, mu(s))``: the first critic of the stacked ensemble (as the paper
    and TorchRL), critic params detached."""
    obs = unpack_transitions(batch)[0]
    ensemble_size("critic_params", critic_params)
    first_critic = tree.index(frozen(critic_params), 0)
    return td3_actor_loss(nets.apply(critic, first_critic, obs, nets.apply(actor, actor_params, obs)))


def ddpg_critic_objective(
    critic_params: Params,
    target_actor_params: Params,
    target_critic_params: Params,
    batch: Mapping[str, torch.Tensor],
    *,
    actor: nn.Module,
    critic: nn.Module,
    gamma: Scalar,
    distance: str = "l2",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """DDPG critic loss with one (unstacked) critic: ``y = r + gamma (1 - d) Q'(s', mu'(s'))``."""
    obs, action, reward, next_obs, terminated = unpack_transitions(batch)
    next_action = nets.apply(actor, frozen(target_actor_params), next_obs)
    next_q = nets.apply(critic, frozen(target_critic_params), next_obs, next_action)
    target = bellman_target(reward, terminated, next_q, gamma)
    q = nets.apply(critic, critic_params, obs, action)
    return ddpg_critic_loss(q.unsqueeze(0), target, distance)


def ddpg_actor_objective(
    actor_params: Params,
    critic_params: Params,
    batch: Mapping[str, torch.Tensor],
    *,
    actor: nn.Module,
    critic: nn.Module,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """DDPG actor loss ``-mean Q(s, mu(s))`` with one (unstacked) critic, critic params detached."""
    obs = unpack_transitions(batch)[0]
    return ddpg_actor_loss(
        nets.apply(critic, frozen(critic_params), obs, nets.apply(actor, actor_params, obs))
    )
