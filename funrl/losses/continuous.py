"""Actor-critic losses for continuous control: DDPG, TD3, SAC (and discrete SAC), REDQ, CrossQ.

One small function per equation, rlax style. The core of every loss is a function of tensors:

- critics come as an ensemble ``q_values[E, B]`` (E critics, B transitions): the twin critic of
  TD3/SAC is ``E = 2``, REDQ's ensemble is ``E = N``, DDPG's single critic is ``E = 1``. Evaluate
  a stacked-params critic once with ``torch.func.vmap`` to get it;
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

References: DDPG (Lillicrap et al. 2016), TD3 (Fujimoto et al. 2018), SAC (Haarnoja et al. 2018,
"Soft Actor-Critic Algorithms and Applications" for the learned temperature), discrete SAC
(Christodoulou 2019), REDQ (Chen et al. 2021), CrossQ (Bhatt et al. 2024).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from funrl import nets, random, tree
from funrl.losses._checks import (
    check_bool,
    check_choice,
    check_floating,
    check_integer,
    check_min_dim,
    check_nonnegative,
    check_same_shape,
    check_scalar_or_broadcastable,
    check_shape,
    check_unit_interval,
)

__all__ = [
    "DISTANCES",
    "bellman_target",
    "soft_state_value",
    "ensemble_critic_loss",
    "ddpg_critic_loss",
    "ddpg_actor_loss",
    "td3_smoothing_noise",
    "smoothed_target_action",
    "td3_critic_loss",
    "td3_actor_loss",
    "sac_target_entropy",
    "sac_critic_loss",
    "sac_actor_loss",
    "sac_temperature_loss",
    "discrete_soft_state_value",
    "discrete_sac_critic_loss",
    "discrete_sac_actor_loss",
    "discrete_sac_target_entropy",
    "redq_subset",
    "redq_target_value",
    "redq_actor_loss",
    "crossq_target",
    "ensemble_q",
    "sac_critic_objective",
    "sac_actor_objective",
    "td3_critic_objective",
    "td3_actor_objective",
    "ddpg_critic_objective",
    "ddpg_actor_objective",
    "redq_critic_objective",
    "redq_actor_objective",
    "discrete_sac_critic_objective",
    "discrete_sac_actor_objective",
    "crossq_critic_objective",
    "crossq_actor_objective",
]

Scalar = float | torch.Tensor
Params = Any

DISTANCES = ("l2", "smooth_l1", "l1")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _distance(prediction: torch.Tensor, target: torch.Tensor, distance: str) -> torch.Tensor:
    """Elementwise regression distance (no reduction)."""
    if distance == "l2":
        return (prediction - target).square()
    if distance == "smooth_l1":
        return F.smooth_l1_loss(prediction, target, reduction="none")
    return (prediction - target).abs()


def _check_ensemble(name: str, q_values: torch.Tensor, batch_name: str, batch: torch.Tensor) -> None:
    """``q_values`` must be a float ``[E, *batch.shape]`` ensemble of values."""
    check_floating(name, q_values)
    if q_values.dim() != batch.dim() + 1 or q_values.shape[1:] != batch.shape:
        raise ValueError(
            f"{name}: expected shape [E, {', '.join(map(str, batch.shape))}] (an ensemble over the "
            f"shape of {batch_name}), got {tuple(q_values.shape)}"
        )


def _check_weight(name: str, value: Scalar, like_name: str, like: torch.Tensor) -> None:
    check_nonnegative(name, value)
    check_scalar_or_broadcastable(name, value, like_name, like)


# --------------------------------------------------------------------------------------------
# Shared targets and the ensemble regression loss.


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
    _check_ensemble("next_q_values", next_q_values, "next_log_prob", next_log_prob)
    _check_weight("alpha", alpha, "next_log_prob", next_log_prob)
    return next_q_values.min(dim=0).values - alpha * next_log_prob


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
    _check_ensemble("q_values", q_values, "target", target)
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


# --------------------------------------------------------------------------------------------
# DDPG and TD3.

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
    policy_noise: float,
    noise_clip: float,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """TD3 target policy smoothing noise ``clip(N(0, policy_noise^2), -noise_clip, noise_clip)``.

    Fujimoto et al. 2018, eq. 14 (defaults there: ``policy_noise = 0.2``, ``noise_clip = 0.5``, in
    units of the action scale).
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


# --------------------------------------------------------------------------------------------
# SAC with a learned temperature.


def sac_target_entropy(action_dim: int) -> float:
    """The usual target entropy ``-dim(A)`` (Haarnoja et al. 2018b; TorchRL's ``"auto"``)."""
    if not _is_int(action_dim) or action_dim < 1:
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
    _check_ensemble("q_values", q_values, "log_prob", log_prob)
    _check_weight("alpha", alpha, "log_prob", log_prob)
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


# --------------------------------------------------------------------------------------------
# Discrete SAC (Christodoulou 2019): expectations over the action distribution are exact sums.


def _check_discrete(name: str, logits: torch.Tensor) -> None:
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
    _check_discrete("next_logits", next_logits)
    _check_ensemble("next_q_values", next_q_values, "next_logits", next_logits)
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
    _check_discrete("logits", logits)
    _check_ensemble("q_values", q_values, "logits", logits)
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
    if not _is_int(num_actions) or num_actions < 2:
        raise ValueError(f"num_actions: expected an int >= 2, got {num_actions!r}")
    check_unit_interval("scale", scale)
    return scale * math.log(num_actions)


# --------------------------------------------------------------------------------------------
# REDQ: the target is the minimum over a random subset of M of the N target critics.


def redq_subset(key: torch.Tensor, num_critics: int, subset_size: int) -> torch.Tensor:
    """``subset_size`` distinct critic indices out of ``num_critics``, drawn uniformly (``[M]`` int64)."""
    if not _is_int(num_critics) or num_critics < 1:
        raise ValueError(f"num_critics: expected a positive int, got {num_critics!r}")
    if not _is_int(subset_size) or not 1 <= subset_size <= num_critics:
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
    _check_ensemble("next_q_values", next_q_values, "next_log_prob", next_log_prob)
    return soft_state_value(next_q_values.index_select(0, subset), next_log_prob, alpha)


# --------------------------------------------------------------------------------------------
# CrossQ: no target network; the target comes from the online batch-norm critic.


def crossq_target(
    reward: torch.Tensor,
    terminated: torch.Tensor,
    next_q_values: torch.Tensor,
    next_log_prob: torch.Tensor,
    gamma: Scalar,
    alpha: Scalar,
) -> torch.Tensor:
    """Soft Bellman target from the *online* critic's next-state values (Bhatt et al. 2024).

    CrossQ evaluates ``(s, a)`` and ``(s', a')`` in one joint batch so that batch normalisation
    sees both distributions; ``next_q_values`` is the ``s'`` half of that joint forward pass.
    The target is detached (it stands in for the removed target network).

    Args:
      reward, terminated: ``[B]``.
      next_q_values: ``[E, B]`` online critics at ``(s', a' ~ pi(s'))``.
      next_log_prob: ``[B]``.
      gamma: discount; alpha: temperature.
    """
    next_value = soft_state_value(next_q_values, next_log_prob, alpha)
    return bellman_target(reward, terminated, next_value, gamma).detach()


def redq_actor_loss(
    q_values: torch.Tensor, log_prob: torch.Tensor, alpha: Scalar
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """REDQ policy loss ``mean_b [alpha * log pi(a_b|s_b) - mean_e Q_e(s_b, a_b)]`` over all N critics.

    Chen et al. 2021, Alg. 2, line 12 (the ensemble *mean*, where SAC takes the minimum of two).
    """
    check_floating("log_prob", log_prob)
    _check_ensemble("q_values", q_values, "log_prob", log_prob)
    _check_weight("alpha", alpha, "log_prob", log_prob)
    if isinstance(alpha, torch.Tensor):
        alpha = alpha.detach()
    mean_q = q_values.mean(dim=0)
    loss = (alpha * log_prob - mean_q).mean()
    return loss, {"entropy": -log_prob.detach().mean(), "q_actor_mean": mean_q.detach().mean()}


# ============================================================================================
# Parameter-level objectives: (params, ..., batch, key) -> (loss, metrics), built on funrl.nets.
#
# The first argument is the params pytree being trained, so
# ``torch.func.grad_and_value(objective, has_aux=True)(params, ...)`` gives its gradient.
# Modules are ``funrl.nets`` skeletons passed by keyword (static: ``torch.compile`` specialises on
# them). Critics of SAC/TD3/REDQ/CrossQ/discrete SAC are *stacked* params (leading dim E, from
# ``funrl.nets.init_ensemble`` or ``funrl.tree.stack``) evaluated with one ``vmap``.
#
# ``batch`` is a mapping (a dict, or a TensorDict) with ``obs [B, ...]``, ``action [B, A]`` (int
# ``[B]`` for discrete SAC), ``reward [B]``, ``next_obs [B, ...]`` and bool ``terminated [B]``.
# ``next_obs`` of a truncated transition is its ``final_obs``. Stochastic policies are tanh-squashed
# Gaussians (``funrl.nets.distributions.tanh_normal``, actions in (-1, 1)): actors return
# ``(loc, scale)`` (e.g. ``funrl.nets.GaussianActor(..., state_dependent_std=True)``); deterministic
# actors (DDPG/TD3) return actions already within the action bounds.

_BATCH_KEYS = ("obs", "action", "reward", "next_obs", "terminated")


def _unpack(batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    missing = [k for k in _BATCH_KEYS if k not in batch.keys()]
    if missing:
        raise ValueError(f"batch: expected entries {_BATCH_KEYS}, missing {missing}")
    return tuple(batch[k] for k in _BATCH_KEYS)


def _detach(params: Params) -> Params:
    return tree.map(torch.Tensor.detach, params)


def _ensemble_size(name: str, params: Params) -> int:
    sizes = {leaf.shape[0] if leaf.dim() > 0 else None for leaf in tree.leaves(params)}
    if len(sizes) != 1 or None in sizes:
        raise ValueError(f"{name}: expected stacked ensemble params with one leading size, got sizes {sizes}")
    return sizes.pop()


def ensemble_q(critic: nn.Module, params: Params, *inputs: torch.Tensor) -> torch.Tensor:
    """All members of a stacked-params critic ensemble on the same inputs, with one ``vmap``.

    Returns ``[E, *critic_output_shape]``, e.g. ``[E, B]`` for ``funrl.nets.ContinuousQ`` and
    ``[E, B, num_actions]`` for a discrete Q-network.
    """
    _ensemble_size("params", params)
    in_dims = (None, 0) + (None,) * len(inputs)
    return torch.func.vmap(nets.apply, in_dims=in_dims, randomness="error")(critic, params, *inputs)


def _sample_policy(
    actor: nn.Module, actor_params: Params, obs: torch.Tensor, key: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    loc, scale = nets.apply(actor, actor_params, obs)
    return nets.distributions.tanh_normal.sample_and_log_prob(key, loc, scale)


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
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """SAC critic loss from params: target ``r + gamma (1 - d) [min_e Q'_e(s', a') - alpha log pi(a'|s')]``.

    ``a' ~ pi(s')`` is drawn with ``key``. Returns ``sac_critic_loss``'s ``(loss, metrics)``.
    """
    obs, action, reward, next_obs, terminated = _unpack(batch)
    next_action, next_log_prob = _sample_policy(actor, _detach(actor_params), next_obs, key)
    next_q = ensemble_q(critic, _detach(target_critic_params), next_obs, next_action)
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
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """SAC actor loss from params (critics detached). ``metrics["log_prob"]`` ``[B]`` feeds
    ``sac_temperature_loss``, so the temperature step needs no second actor pass."""
    obs = _unpack(batch)[0]
    action, log_prob = _sample_policy(actor, actor_params, obs, key)
    q = ensemble_q(critic, _detach(critic_params), obs, action)
    loss, metrics = sac_actor_loss(q, log_prob, alpha)
    return loss, {**metrics, "log_prob": log_prob.detach()}


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
    policy_noise: float = 0.2,
    noise_clip: float = 0.5,
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
    obs, action, reward, next_obs, terminated = _unpack(batch)
    next_action = nets.apply(actor, _detach(target_actor_params), next_obs)
    noise = td3_smoothing_noise(key, tuple(next_action.shape), policy_noise, noise_clip, next_action.dtype)
    next_action = smoothed_target_action(next_action, noise, action_low, action_high)
    next_q = ensemble_q(critic, _detach(target_critic_params), next_obs, next_action)
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
    obs = _unpack(batch)[0]
    _ensemble_size("critic_params", critic_params)
    first_critic = tree.index(_detach(critic_params), 0)
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
    obs, action, reward, next_obs, terminated = _unpack(batch)
    next_action = nets.apply(actor, _detach(target_actor_params), next_obs)
    next_q = nets.apply(critic, _detach(target_critic_params), next_obs, next_action)
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
    obs = _unpack(batch)[0]
    return ddpg_actor_loss(
        nets.apply(critic, _detach(critic_params), obs, nets.apply(actor, actor_params, obs))
    )


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
    obs, action, reward, next_obs, terminated = _unpack(batch)
    num_critics = _ensemble_size("critic_params", critic_params)
    subset_key, action_key = random.split(key)
    subset = redq_subset(subset_key, num_critics, subset_size)
    next_action, next_log_prob = _sample_policy(actor, _detach(actor_params), next_obs, action_key)
    subset_params = tree.map(lambda p: p.index_select(0, subset), _detach(target_critic_params))
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
    obs = _unpack(batch)[0]
    action, log_prob = _sample_policy(actor, actor_params, obs, key)
    loss, metrics = redq_actor_loss(ensemble_q(critic, _detach(critic_params), obs, action), log_prob, alpha)
    return loss, {**metrics, "log_prob": log_prob.detach()}


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
    obs, action, reward, next_obs, terminated = _unpack(batch)
    next_logits = nets.apply(actor, _detach(actor_params), next_obs)
    next_q = ensemble_q(critic, _detach(target_critic_params), next_obs)
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
    obs = _unpack(batch)[0]
    q = ensemble_q(critic, _detach(critic_params), obs)
    return discrete_sac_actor_loss(q, nets.apply(actor, actor_params, obs), alpha)


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
    """CrossQ critic loss: a batch-norm critic ensemble, no target network (Bhatt et al. 2024).

    ``(s, a)`` and ``(s', a' ~ pi(s'))`` go through the critics as one joint batch of ``2B``, so
    batch normalisation normalises both with the same statistics; the ``s'`` half gives the
    (detached) soft Bellman target. ``critic`` must be a skeleton in training mode.

    Args:
      critic_params: stacked critic parameters ``[E, ...]``.
      critic_buffers: stacked batch-norm buffers ``[E, ...]`` (``funrl.nets.init_buffers`` stacked).
        They are not modified: the updated running statistics come back as
        ``metrics["critic_buffers"]``; carry those forward.
    """
    _check_mode(critic, True, "critic loss")
    obs, action, reward, next_obs, terminated = _unpack(batch)
    next_action, next_log_prob = _sample_policy(actor, _detach(actor_params), next_obs, key)
    # Batch norm updates running statistics in place: work on copies so the inputs stay untouched.
    buffers = tree.map(torch.clone, critic_buffers)
    joint_q = ensemble_q(
        critic, {**critic_params, **buffers}, torch.cat([obs, next_obs]), torch.cat([action, next_action])
    )
    q, next_q = joint_q.split(obs.shape[0], dim=1)
    target = crossq_target(reward, terminated, next_q, next_log_prob, gamma, alpha)
    loss, metrics = ensemble_critic_loss(q, target, distance)
    return loss, {**metrics, "critic_buffers": _detach(buffers)}


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
    obs = _unpack(batch)[0]
    action, log_prob = _sample_policy(actor, actor_params, obs, key)
    q = ensemble_q(critic, {**_detach(critic_params), **critic_buffers}, obs, action)
    loss, metrics = sac_actor_loss(q, log_prob, alpha)
    return loss, {**metrics, "log_prob": log_prob.detach()}
