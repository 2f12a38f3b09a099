"""Offline RL losses: behaviour cloning, CQL (continuous and discrete), IQL, TD3+BC.

Same conventions as the actor-critic losses (:mod:`funrl.losses.bellman`): tensor-level
functions with documented shapes returning ``(loss, metrics)``, critic ensembles as ``[E, B]``
(stacked params evaluated with one ``vmap``), and parameter-level objectives whose first argument
is the params being trained (:mod:`funrl.losses._objectives`). Batches are mappings with ``obs``,
``action``, ``reward``, ``next_obs`` and bool ``terminated``.

References: CQL (Kumar et al. 2020, CQL(H) with importance-sampled log-sum-exp, as the authors'
code), IQL (Kostrikov et al. 2022), TD3+BC (Fujimoto & Gu 2021).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from funrl import nets, random, tree
from funrl.losses._checks import (
    check_choice,
    check_ensemble,
    check_floating,
    check_integer,
    check_min_dim,
    check_nonnegative,
    check_positive,
    check_same_shape,
    check_shape,
)
from funrl.losses._objectives import Params, frozen, sample_policy, unpack_transitions
from funrl.losses.bellman import (
    DISTANCES,
    bellman_target,
    ensemble_critic_loss,
    ensemble_q,
    soft_state_value,
)

__all__ = [
    "bc_log_likelihood_loss",
    "bc_mse_loss",
    "cql_regularizer",
    "cql_lagrange_loss",
    "discrete_cql_regularizer",
    "expectile_loss",
    "iql_value_loss",
    "iql_critic_loss",
    "iql_actor_loss",
    "td3_bc_actor_loss",
    "bc_objective",
    "cql_critic_objective",
    "iql_value_objective",
    "iql_critic_objective",
    "iql_actor_objective",
    "td3_bc_actor_objective",
]

Scalar = float | torch.Tensor


# --------------------------------------------------------------------------------------------
# Behaviour cloning.


def bc_log_likelihood_loss(log_prob: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``-mean_b log pi(a_b | s_b)`` of the dataset actions (a stochastic policy)."""
    check_floating("log_prob", log_prob)
    check_min_dim("log_prob", log_prob, 1, "[B]")
    return -log_prob.mean(), {"log_prob_mean": log_prob.detach().mean()}


def bc_mse_loss(
    predicted_action: torch.Tensor, action: torch.Tensor
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``mean (mu(s) - a)^2`` over batch and action dims (a deterministic policy; TD3+BC's BC term)."""
    check_floating("predicted_action", predicted_action)
    check_floating("action", action)
    check_same_shape("action", action, predicted_action=predicted_action)
    loss = (predicted_action - action.detach()).square().mean()
    return loss, {"bc_mse": loss.detach()}


# --------------------------------------------------------------------------------------------
# CQL.


def cql_regularizer(
    q_data: torch.Tensor,
    q_random: torch.Tensor,
    q_policy: torch.Tensor,
    log_prob_policy: torch.Tensor,
    q_next_policy: torch.Tensor,
    log_prob_next_policy: torch.Tensor,
    action_dim: int,
    temperature: Scalar = 1.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """CQL(H) conservative penalty, importance-sampled, per critic: ``T logsumexp(Q/T) - Q(s, a_data)``.

    For each critic e and state b, the log-sum-exp runs over all ``3N`` proposal actions (N
    uniform in ``[-1, 1]^A``, N from ``pi(.|s)``, N from ``pi(.|s')``, each evaluated at ``s``), each
    corrected by its proposal log-density (``log 0.5^A`` for the uniform ones), as in the CQL
    authors' code (Kumar et al. 2020, eq. 4 / App. F).

    Args:
      q_data: ``[E, B]`` critics at the dataset actions.
      q_random, q_policy, q_next_policy: ``[E, B, N]`` critics at the proposal actions.
      log_prob_policy, log_prob_next_policy: ``[B, N]`` proposal log-probabilities (constants).
      action_dim: A, for the uniform proposal density.
      temperature: T > 0.

    Returns:
      ``(loss, metrics)``: ``loss = mean_b sum_e [T lse_e,b - q_data_e,b]`` (unweighted; scale it by
      CQL's ``alpha``/``min_q_weight``); metrics ``cql_gap`` ``[E]`` (the per-critic penalty, what
      the Lagrange version of CQL constrains).

    TorchRL 0.14's ``CQLLoss.cql_loss`` differs in two ways: its log-sum-exp runs over only the
    three proposal kinds of each single sample (its ``[B*N, 1]`` q-values are concatenated on the
    last dim without the ``[B, N]`` reshape), and it evaluates the ``pi(.|s')`` proposals at ``s'``.
    The cross-check tests pin both differences down.
    """
    check_floating("q_data", q_data)
    check_min_dim("q_data", q_data, 2, "[E, B]")
    for name, value in (("q_random", q_random), ("q_policy", q_policy), ("q_next_policy", q_next_policy)):
        check_floating(name, value)
        if value.dim() != 3 or value.shape[:2] != q_data.shape:
            raise ValueError(
                f"{name}: expected shape [{q_data.shape[0]}, {q_data.shape[1]}, N] ([E, B] of q_data, "
                f"then proposals), got {tuple(value.shape)}"
            )
    check_same_shape("q_random", q_random, q_policy=q_policy, q_next_policy=q_next_policy)
    for name, value in (("log_prob_policy", log_prob_policy), ("log_prob_next_policy", log_prob_next_policy)):
        check_floating(name, value)
        check_shape(name, value, tuple(q_random.shape[1:]), "[B, N]")
    if isinstance(action_dim, bool) or not isinstance(action_dim, int) or action_dim < 1:
        raise ValueError(f"action_dim: expected a positive int, got {action_dim!r}")
    check_positive("temperature", temperature)
    uniform_log_density = action_dim * math.log(0.5)
    candidates = torch.cat(
        [
            q_random - uniform_log_density,
            q_next_policy - log_prob_next_policy.detach(),
            q_policy - log_prob_policy.detach(),
        ],
        dim=-1,
    )
    soft_max = temperature * torch.logsumexp(candidates / temperature, dim=-1)
    gap = soft_max - q_data  # [E, B]
    return gap.sum(dim=0).mean(), {"cql_gap": gap.detach().mean(dim=1)}


def cql_lagrange_loss(
    log_alpha_prime: torch.Tensor, cql_gap: torch.Tensor, target_action_gap: float
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Lagrange-multiplier loss of CQL: ``-mean_e alpha' (gap_e - tau)``, ``alpha' = exp(log_alpha')``.

    Minimising it raises ``alpha'`` when the penalty exceeds the threshold ``tau`` (the
    "with_lagrange" variant; TorchRL's ``alpha_prime_loss``, which clamps ``alpha'`` at 1e6).
    ``cql_gap`` ``[E]`` is a constant here (``metrics["cql_gap"]`` of ``cql_regularizer``).
    """
    check_floating("log_alpha_prime", log_alpha_prime)
    check_shape("log_alpha_prime", log_alpha_prime, (), "a scalar")
    check_floating("cql_gap", cql_gap)
    check_min_dim("cql_gap", cql_gap, 1, "[E]")
    alpha_prime = log_alpha_prime.exp().clamp(max=1e6)
    loss = -(alpha_prime * (cql_gap.detach() - target_action_gap)).mean()
    return loss, {"alpha_prime": alpha_prime.detach()}


def discrete_cql_regularizer(
    q_values: torch.Tensor, action: torch.Tensor
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Discrete CQL penalty ``mean_b [logsumexp_a Q(s_b, a) - Q(s_b, a_b)]`` (as TorchRL's DiscreteCQLLoss).

    Args:
      q_values: ``[B, num_actions]``; action: ``[B]`` integer dataset actions.
    """
    check_integer("action", action)
    check_floating("q_values", q_values)
    if q_values.dim() != action.dim() + 1 or q_values.shape[:-1] != action.shape:
        raise ValueError(
            f"q_values: expected shape [{', '.join(map(str, action.shape))}, num_actions], "
            f"got {tuple(q_values.shape)}"
        )
    q_taken = q_values.gather(-1, action.unsqueeze(-1)).squeeze(-1)
    gap = torch.logsumexp(q_values, dim=-1) - q_taken
    return gap.mean(), {"cql_gap": gap.detach().mean()}


# --------------------------------------------------------------------------------------------
# IQL.


def expectile_loss(diff: torch.Tensor, expectile: Scalar) -> torch.Tensor:
    """Asymmetric squared loss ``|tau - 1(u < 0)| u^2`` elementwise (Kostrikov et al. 2022, eq. 5).

    ``expectile`` is tau in [0, 1): a Python float (range-checked) or a float tensor.
    """
    check_floating("diff", diff)
    check_nonnegative("expectile", expectile)
    if not isinstance(expectile, torch.Tensor) and not expectile < 1.0:
        raise ValueError(f"expectile: expected a value in [0, 1), got {expectile!r}")
    weight = (expectile - (diff < 0).to(diff.dtype)).abs()
    return weight * diff.square()


def iql_value_loss(
    q_values: torch.Tensor, value: torch.Tensor, expectile: Scalar = 0.7
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """IQL value loss ``mean_b L2_tau(min_e Q'_e(s_b, a_b) - V(s_b))`` with dataset actions.

    Args:
      q_values: ``[E, B]`` (target) critics at the dataset actions (constants here).
      value: ``[B]`` V(s), trained by this loss.
      expectile: tau in [0, 1); the paper uses 0.7 (locomotion) / 0.9 (AntMaze); TorchRL's default
        is 0.5.
    """
    check_floating("value", value)
    check_ensemble("q_values", q_values, "value", value)
    diff = q_values.detach().min(dim=0).values - value
    return expectile_loss(diff, expectile).mean(), {"value_mean": value.detach().mean()}


def iql_critic_loss(
    q_values: torch.Tensor,
    reward: torch.Tensor,
    terminated: torch.Tensor,
    next_value: torch.Tensor,
    gamma: Scalar,
    distance: str = "l2",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """IQL critic loss: every critic regresses onto ``r + gamma (1 - d) V(s')`` (no actor in the target)."""
    target = bellman_target(reward, terminated, next_value, gamma)
    return ensemble_critic_loss(q_values, target, distance)


def iql_actor_loss(
    log_prob: torch.Tensor,
    q_values: torch.Tensor,
    value: torch.Tensor,
    temperature: Scalar = 3.0,
    max_weight: Scalar = 100.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Advantage-weighted regression ``-mean_b min(exp(beta (min_e Q'_e - V)), w_max) log pi(a_b|s_b)``.

    Args:
      log_prob: ``[B]`` log-probabilities of the dataset actions under the policy.
      q_values: ``[E, B]`` target critics at the dataset actions; value: ``[B]`` V(s). Both constant.
      temperature: beta >= 0 (inverse temperature; paper: 3 locomotion, 10 AntMaze; TorchRL: 1).
      max_weight: weight clip (100 in the paper's code and TorchRL).
    """
    check_floating("log_prob", log_prob)
    check_floating("value", value)
    check_same_shape("log_prob", log_prob, value=value)
    check_ensemble("q_values", q_values, "log_prob", log_prob)
    check_nonnegative("temperature", temperature)
    check_positive("max_weight", max_weight)
    advantage = (q_values.min(dim=0).values - value).detach()
    weight = torch.exp(temperature * advantage).clamp(max=max_weight)
    loss = -(weight * log_prob).mean()
    return loss, {"advantage_mean": advantage.mean(), "weight_mean": weight.mean()}


# --------------------------------------------------------------------------------------------
# TD3+BC.


def td3_bc_actor_loss(
    q_value: torch.Tensor, predicted_action: torch.Tensor, action: torch.Tensor, alpha: Scalar = 2.5
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """TD3+BC actor loss ``-lambda mean_b Q_1(s, pi(s)) + mean (pi(s) - a)^2``, ``lambda = alpha / mean|Q|``.

    ``lambda`` is a constant (detached), as in Fujimoto & Gu 2021 and TorchRL.

    Args:
      q_value: ``[B]`` first critic at the policy's actions; predicted_action: ``[B, A]`` pi(s);
      action: ``[B, A]`` dataset actions; alpha: the paper's 2.5.
    """
    check_floating("q_value", q_value)
    check_min_dim("q_value", q_value, 1, "[B]")
    check_positive("alpha", alpha)
    bc, _ = bc_mse_loss(predicted_action, action)
    lmbda = alpha / q_value.abs().mean().detach()
    loss = -lmbda * q_value.mean() + bc
    return loss, {"bc_mse": bc.detach(), "lambda": lmbda, "q_actor_mean": q_value.detach().mean()}


# ============================================================================================
# Parameter-level objectives (conventions in funrl.losses._objectives).


def bc_objective(
    actor_params: Params, batch: Mapping[str, torch.Tensor], *, actor: torch.nn.Module, deterministic: bool
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """BC from params: ``bc_mse_loss`` for a deterministic actor (returns actions), else
    ``bc_log_likelihood_loss`` under the tanh-Gaussian of an actor returning ``(loc, scale)``."""
    obs, action = unpack_transitions(batch)[:2]
    if deterministic:
        return bc_mse_loss(nets.apply(actor, actor_params, obs), action)
    loc, scale = nets.apply(actor, actor_params, obs)
    return bc_log_likelihood_loss(nets.distributions.tanh_normal.log_prob(loc, scale, action))


def _repeat(x: torch.Tensor, n: int) -> torch.Tensor:
    """``[B, ...] -> [B * n, ...]``, each row repeated n times consecutively."""
    return x.repeat_interleave(n, dim=0)


def cql_critic_objective(
    critic_params: Params,
    actor_params: Params,
    target_critic_params: Params,
    alpha: Scalar,
    batch: Mapping[str, torch.Tensor],
    key: torch.Tensor,
    *,
    actor: torch.nn.Module,
    critic: torch.nn.Module,
    gamma: Scalar,
    cql_weight: Scalar = 1.0,
    num_samples: int = 10,
    temperature: Scalar = 1.0,
    backup_entropy: bool = False,
    distance: str = "l2",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """CQL(H) critic loss from params: SAC's clipped double-Q regression plus ``cql_weight`` times the
    conservative penalty (``cql_regularizer``) with ``num_samples`` proposals of each kind.

    ``backup_entropy=False`` (default, as the CQL authors' code and TorchRL's
    ``deterministic_backup=True``) drops the ``-alpha log pi`` term from the target.
    Metrics: ``critic_loss``, ``cql_penalty`` and ``cql_gap`` ``[E]`` besides the regression ones.
    """
    check_choice("distance", distance, DISTANCES)
    check_nonnegative("cql_weight", cql_weight)
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"num_samples: expected a positive int, got {num_samples!r}")
    obs, action, reward, next_obs, terminated = unpack_transitions(batch)
    batch_size, action_dim = action.shape[0], action.shape[-1]
    backup_key, random_key, policy_key, next_policy_key = random.split(key, 4)
    frozen_actor = frozen(actor_params)

    next_action, next_log_prob = sample_policy(actor, frozen_actor, next_obs, backup_key)
    next_q = ensemble_q(critic, frozen(target_critic_params), next_obs, next_action)
    next_value = soft_state_value(next_q, next_log_prob, alpha if backup_entropy else 0.0)
    q_data = ensemble_q(critic, critic_params, obs, action)
    critic_loss, metrics = ensemble_critic_loss(
        q_data, bellman_target(reward, terminated, next_value, gamma), distance
    )

    # Proposals, all evaluated at s (the s'-policy actions too, as in CQL's code): [B * N, A].
    obs_rep = _repeat(obs, num_samples)
    random_action = random.uniform(random_key, (batch_size * num_samples, action_dim), obs.dtype, -1.0, 1.0)
    policy_action, policy_log_prob = sample_policy(actor, frozen_actor, obs_rep, policy_key)
    next_policy_action, next_policy_log_prob = sample_policy(
        actor, frozen_actor, _repeat(next_obs, num_samples), next_policy_key
    )
    proposals = torch.cat([random_action, policy_action.detach(), next_policy_action.detach()])
    q_proposals = ensemble_q(critic, critic_params, obs_rep.repeat(3, 1), proposals)
    q_random, q_policy, q_next_policy = (
        q.reshape(q.shape[0], batch_size, num_samples) for q in q_proposals.chunk(3, dim=1)
    )
    penalty, penalty_metrics = cql_regularizer(
        q_data,
        q_random,
        q_policy,
        policy_log_prob.reshape(batch_size, num_samples),
        q_next_policy,
        next_policy_log_prob.reshape(batch_size, num_samples),
        action_dim,
        temperature,
    )
    loss = critic_loss + cql_weight * penalty
    return loss, {
        **metrics,
        **penalty_metrics,
        "critic_loss": critic_loss.detach(),
        "cql_penalty": penalty.detach(),
    }


def _state_value(value_net: torch.nn.Module, value_params: Params, obs: torch.Tensor) -> torch.Tensor:
    """``V(s)`` as ``[B]``; a trailing output dim of size 1 (``nets.MLP(obs_dim, ..., 1)``) is dropped."""
    value = nets.apply(value_net, value_params, obs)
    return value.squeeze(-1) if value.dim() == obs.dim() and value.shape[-1] == 1 else value


def iql_value_objective(
    value_params: Params,
    target_critic_params: Params,
    batch: Mapping[str, torch.Tensor],
    *,
    value_net: torch.nn.Module,
    critic: torch.nn.Module,
    expectile: Scalar = 0.7,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """IQL value loss from params (``value_net(obs) -> [B]`` or ``[B, 1]``)."""
    obs, action = unpack_transitions(batch)[:2]
    q = ensemble_q(critic, frozen(target_critic_params), obs, action)
    return iql_value_loss(q, _state_value(value_net, value_params, obs), expectile)


def iql_critic_objective(
    critic_params: Params,
    value_params: Params,
    batch: Mapping[str, torch.Tensor],
    *,
    value_net: torch.nn.Module,
    critic: torch.nn.Module,
    gamma: Scalar,
    distance: str = "l2",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """IQL critic loss from params: target ``r + gamma (1 - d) V(s')``."""
    obs, action, reward, next_obs, terminated = unpack_transitions(batch)
    next_value = _state_value(value_net, frozen(value_params), next_obs)
    q = ensemble_q(critic, critic_params, obs, action)
    return iql_critic_loss(q, reward, terminated, next_value, gamma, distance)


def iql_actor_objective(
    actor_params: Params,
    value_params: Params,
    target_critic_params: Params,
    batch: Mapping[str, torch.Tensor],
    *,
    actor: torch.nn.Module,
    value_net: torch.nn.Module,
    critic: torch.nn.Module,
    temperature: Scalar = 3.0,
    max_weight: Scalar = 100.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """IQL actor loss from params: dataset-action log-likelihood under the tanh-Gaussian policy,
    weighted by ``exp(beta * advantage)``."""
    obs, action = unpack_transitions(batch)[:2]
    loc, scale = nets.apply(actor, actor_params, obs)
    log_prob = nets.distributions.tanh_normal.log_prob(loc, scale, action)
    q = ensemble_q(critic, frozen(target_critic_params), obs, action)
    value = _state_value(value_net, frozen(value_params), obs)
    return iql_actor_loss(log_prob, q, value, temperature, max_weight)


def td3_bc_actor_objective(
    actor_params: Params,
    critic_params: Params,
    batch: Mapping[str, torch.Tensor],
    *,
    actor: torch.nn.Module,
    critic: torch.nn.Module,
    alpha: Scalar = 2.5,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """TD3+BC actor loss from params (first critic of the stacked ensemble, detached). The critic
    loss is TD3's (``funrl.losses.td3_critic_objective``)."""
    obs, action = unpack_transitions(batch)[:2]
    predicted = nets.apply(actor, actor_params, obs)
    first_critic = tree.index(frozen(critic_params), 0)
    return td3_bc_actor_loss(nets.apply(critic, first_critic, obs, predicted), predicted, action, alpha)
