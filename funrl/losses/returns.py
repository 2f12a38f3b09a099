"""Value estimators: TD error, discounted, n-step and λ-returns, GAE, V-trace, Retrace.

Each estimator is the paper's backward recurrence, written once as a step function and run over
time with :func:`funrl.control.scan` (``reverse=True``), as rlax writes them with
``jax.lax.scan``: a plain Python loop eagerly, one loop node under ``torch.compile``.

All inputs are time-major ``[T, ...]`` (any batch dims after time). Two episode flags are kept
apart, as in TorchRL's ``generalized_advantage_estimate``:

* ``terminated[t]``: ``s'_t`` is terminal, so nothing is bootstrapped from it;
* ``done[t] = terminated[t] | truncated[t]``: the episode ends at ``t`` and the trace is cut; a
  truncated step still bootstraps from ``next_values[t]`` (the value of ``info["final_obs"]``).

Every estimator takes ``next_values[t] = V(s'_t)`` explicitly instead of shifting ``values``:
after an auto-reset ``values[t + 1]`` belongs to the *next* episode, and only the caller knows
the value of the pre-reset observation. The last step of the window always bootstraps from
``next_values[T - 1]``. Estimators keep their inputs' autograd graph; losses detach targets.

``gamma`` and ``lmbda`` are Python numbers (range-checked) or floating tensors that broadcast to
the data: a 0-d tensor (carried in a train state, so a new value never recompiles; batched under
``vmap`` for a sweep), ``[N]`` per environment or ``[T, 1]`` per step. No estimator branches on
their values. Flags must be ``torch.bool`` (see :mod:`funrl.losses._checks`).
"""

from __future__ import annotations

import torch

from funrl.control import scan
from funrl.losses._checks import (
    check_bool,
    check_floating,
    check_min_dim,
    check_nonnegative,
    check_same_shape,
    check_scalar_or_broadcastable,
    check_unit_interval,
)

__all__ = [
    "td_error",
    "discounted_returns",
    "n_step_returns",
    "lambda_returns",
    "gae",
    "vtrace",
    "retrace",
]

Scalar = float | torch.Tensor


# --------------------------------------------------------------------------------------------
# Input checks (static: shapes, dtypes, Python numbers)
# --------------------------------------------------------------------------------------------


def _check_time_major(floats: dict[str, torch.Tensor], flags: dict[str, torch.Tensor]) -> None:
    (ref_name, ref), *_ = floats.items()
    for name, x in floats.items():
        check_floating(name, x)
    check_min_dim(ref_name, ref, 1, "time-major [T, ...]")
    if ref.shape[0] == 0:
        raise ValueError(f"{ref_name}: expected at least one time step, got shape {tuple(ref.shape)}")
    for name, x in flags.items():
        check_bool(name, x)
    check_same_shape(ref_name, ref, **{**floats, **flags})


def _check_rate(name: str, value: Scalar, ref_name: str, ref: torch.Tensor) -> None:
    check_unit_interval(name, value)
    check_scalar_or_broadcastable(name, value, ref_name, ref)


# --------------------------------------------------------------------------------------------
# Pieces shared by the equations
# --------------------------------------------------------------------------------------------


def _continues(flag: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``1 - flag`` in ``like``'s dtype: 1 where the episode goes on past ``t``."""
    return (~flag).to(like.dtype)


def _one_step_target(
    rewards: torch.Tensor, next_values: torch.Tensor, terminated: torch.Tensor, gamma: Scalar
) -> torch.Tensor:
    """``r_t + γ (1 - terminated_t) V(s'_t)``."""
    return rewards + gamma * _continues(terminated, rewards) * next_values


def _next_in_window(x: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
    """``x_{t+1}``, with ``last`` standing in for the step past the window's end."""
    return torch.cat([x[1:], last.unsqueeze(0)])


def _discounted_sum_backwards(errors: torch.Tensor, decays: torch.Tensor) -> torch.Tensor:
    """``y_t = errors_t + decays_t y_{t+1}`` with ``y_T = 0``: ``Σ_k (Π_{j<k} decays_{t+j}) errors_{t+k}``.

    Both GAE (a sum of ``γλ``-discounted TD errors) and V-trace (of ``γc``-discounted corrected
    TD errors) are this sum.
    """

    def step(later_sum: torch.Tensor, x: tuple[torch.Tensor, torch.Tensor]):
        error, decay = x
        total = error + decay * later_sum
        return total, total

    _, sums = scan(step, torch.zeros_like(errors[0]), (errors, decays), reverse=True)
    return sums


# --------------------------------------------------------------------------------------------
# Estimators
# --------------------------------------------------------------------------------------------


def td_error(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    gamma: Scalar,
) -> torch.Tensor:
    """One-step TD error ``δ_t = r_t + γ (1 - terminated_t) V(s'_t) - V(s_t)`` (Sutton 1988).

    Args:
        rewards, values, next_values: ``[T, ...]`` floats.
        terminated: ``[T, ...]`` bool.
        gamma: discount in [0, 1].

    Returns:
        ``[T, ...]`` TD errors. Truncation does not matter for a single step.
    """
    _check_time_major(
        {"rewards": rewards, "values": values, "next_values": next_values}, {"terminated": terminated}
    )
    _check_rate("gamma", gamma, "rewards", rewards)
    return _one_step_target(rewards, next_values, terminated, gamma) - values


def lambda_returns(
    rewards: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: Scalar,
    lmbda: Scalar,
) -> torch.Tensor:
    """TD(λ) returns (Sutton & Barto 2018, eq. 12.18) by their backward recursion:

    ``G_t = r_t + γ (1 - term_t) [(1 - λ_t) V(s'_t) + λ_t G_{t+1}]`` with ``λ_t = λ (1 - done_t)``,
    so the trace stops at an episode's end, and ``G_T = V(s'_{T-1})`` past the window's end.

    Args:
        rewards, next_values: ``[T, ...]`` floats; ``next_values[t] = V(s'_t)``.
        terminated, truncated: ``[T, ...]`` bool.
        gamma, lmbda: in [0, 1].

    Returns:
        ``[T, ...]`` λ-returns. ``λ = 1`` gives bootstrapped Monte-Carlo returns, ``λ = 0`` one-step
        targets.
    """
    _check_time_major(
        {"rewards": rewards, "next_values": next_values},
        {"terminated": terminated, "truncated": truncated},
    )
    _check_rate("gamma", gamma, "rewards", rewards)
    _check_rate("lmbda", lmbda, "rewards", rewards)
    discounts = gamma * _continues(terminated, rewards)
    traces = lmbda * _continues(terminated | truncated, rewards)

    def step(later_return: torch.Tensor, x: tuple[torch.Tensor, ...]):
        reward, discount, next_value, trace = x
        ret = reward + discount * ((1.0 - trace) * next_value + trace * later_return)
        return ret, ret

    _, returns = scan(step, next_values[-1], (rewards, discounts, next_values, traces), reverse=True)
    return returns


def discounted_returns(
    rewards: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: Scalar,
) -> torch.Tensor:
    """Discounted returns ``G_t = r_t + γ (1 - term_t) G_{t+1}``, cut at episode ends.

    A truncated step and the last step of the window bootstrap from ``next_values``; pass zeros
    for a pure Monte-Carlo sum of the rewards seen. This is :func:`lambda_returns` at ``λ = 1``.

    Args:
        rewards, next_values: ``[T, ...]`` floats.
        terminated, truncated: ``[T, ...]`` bool.
        gamma: in [0, 1].

    Returns:
        ``[T, ...]`` returns.
    """
    return lambda_returns(rewards, next_values, terminated, truncated, gamma, 1.0)


def n_step_returns(
    rewards: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: Scalar,
    n: int,
) -> torch.Tensor:
    """n-step bootstrapped returns (Sutton & Barto 2018, eq. 7.1):

    ``G_t = r_t + γ r_{t+1} + ... + γ^{n-1} r_{t+n-1} + γ^n V(s'_{t+n-1})``, where the sum stops
    early at an episode end (bootstrapping from ``next_values`` there unless terminated) or at the
    window's end.

    Args:
        rewards, next_values: ``[T, ...]`` floats.
        terminated, truncated: ``[T, ...]`` bool.
        gamma: in [0, 1].
        n: number of steps, a Python int ``>= 1``. ``n >= T`` gives :func:`discounted_returns`.

    Returns:
        ``[T, ...]`` returns, built from the one-step target ``G^1_t = r_t + γ (1 - term_t) V(s'_t)``
        by ``n - 1`` rounds of ``G^k_t = r_t + γ (1 - term_t) [(1 - c_t) V(s'_t) + c_t G^{k-1}_{t+1}]``
        with ``c_t = 1 - done_t`` (rlax's ``n_step_bootstrapped_returns`` loops over ``n`` alike).
    """
    _check_time_major(
        {"rewards": rewards, "next_values": next_values},
        {"terminated": terminated, "truncated": truncated},
    )
    _check_rate("gamma", gamma, "rewards", rewards)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n: expected an int >= 1, got {n!r}")
    discounts = gamma * _continues(terminated, rewards)
    continues = _continues(terminated | truncated, rewards)
    returns = _one_step_target(rewards, next_values, terminated, gamma)
    for _ in range(min(n, rewards.shape[0]) - 1):  # rounds past T change nothing
        later = _next_in_window(returns, next_values[-1])
        returns = rewards + discounts * ((1.0 - continues) * next_values + continues * later)
    return returns


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: Scalar,
    lmbda: Scalar,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation (Schulman et al. 2016, eq. 16), recursively:

    ``A_t = δ_t + γ λ (1 - done_t) A_{t+1}``, ``A_T = 0``, with
    ``δ_t = r_t + γ (1 - term_t) V(s'_t) - V(s_t)``.

    Args:
        rewards, values, next_values: ``[T, ...]`` floats; ``values[t] = V(s_t)``,
            ``next_values[t] = V(s'_t)`` (the value of ``final_obs`` on a truncated step).
        terminated, truncated: ``[T, ...]`` bool.
        gamma, lmbda: in [0, 1]; floats or tensors broadcastable to ``rewards``.

    Returns:
        ``(advantages, returns)``, both ``[T, ...]``, with ``returns = advantages + values`` (the
        λ-return targets for the critic).
    """
    _check_time_major(
        {"rewards": rewards, "values": values, "next_values": next_values},
        {"terminated": terminated, "truncated": truncated},
    )
    _check_rate("gamma", gamma, "rewards", rewards)
    _check_rate("lmbda", lmbda, "rewards", rewards)
    deltas = _one_step_target(rewards, next_values, terminated, gamma) - values
    traces = gamma * lmbda * _continues(terminated | truncated, rewards)
    advantages = _discounted_sum_backwards(deltas, traces)
    return advantages, advantages + values


def vtrace(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    log_rhos: torch.Tensor,
    gamma: Scalar,
    lmbda: Scalar = 1.0,
    clip_rho_threshold: Scalar = 1.0,
    clip_c_threshold: Scalar = 1.0,
    clip_pg_rho_threshold: Scalar = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """V-trace targets and policy-gradient advantages (Espeholt et al. 2018, IMPALA, eq. 1 and 4).

    With ``ρ_t = min(ρ̄, π/μ)``, ``c_t = λ min(c̄, π/μ)`` and ``δ_t = r_t + γ (1 - term_t) V(s'_t) - V(s_t)``:

    ``v_t - V(s_t) = ρ_t δ_t + γ c_t (1 - done_t) (v_{t+1} - V(s_{t+1}))``,
    ``A^pg_t = min(ρ̄_pg, π/μ) (r_t + γ (1 - term_t) v'_t - V(s_t))`` with ``v'_t = v_{t+1}``
    inside an episode and ``V(s'_t)`` where the trace is cut (episode end or window end).

    Args:
        rewards, values, next_values: ``[T, ...]`` floats.
        terminated, truncated: ``[T, ...]`` bool.
        log_rhos: ``[T, ...]`` ``log π(a_t|s_t) - log μ(a_t|s_t)`` (target minus behaviour).
        gamma, lmbda: in [0, 1].
        clip_rho_threshold, clip_c_threshold, clip_pg_rho_threshold: ``ρ̄``, ``c̄``, ``ρ̄_pg``
            (>= 0; ``float("inf")`` disables a clip).

    Returns:
        ``(vs, pg_advantages)``, both ``[T, ...]``. With on-policy data (``log_rhos = 0``),
        ``λ = 1`` and thresholds >= 1, ``vs`` equals :func:`lambda_returns` at ``λ = 1``.
    """
    _check_time_major(
        {"rewards": rewards, "values": values, "next_values": next_values, "log_rhos": log_rhos},
        {"terminated": terminated, "truncated": truncated},
    )
    _check_rate("gamma", gamma, "rewards", rewards)
    _check_rate("lmbda", lmbda, "rewards", rewards)
    for name, threshold in (
        ("clip_rho_threshold", clip_rho_threshold),
        ("clip_c_threshold", clip_c_threshold),
        ("clip_pg_rho_threshold", clip_pg_rho_threshold),
    ):
        check_nonnegative(name, threshold)
        check_scalar_or_broadcastable(name, threshold, "rewards", rewards)
    rhos = torch.exp(log_rhos)
    done = terminated | truncated
    deltas = _one_step_target(rewards, next_values, terminated, gamma) - values
    corrected_errors = torch.clamp(rhos, max=clip_rho_threshold) * deltas
    traces = lmbda * torch.clamp(rhos, max=clip_c_threshold)
    vs = values + _discounted_sum_backwards(corrected_errors, gamma * traces * _continues(done, rewards))
    later_vs = torch.where(done, next_values, _next_in_window(vs, next_values[-1]))
    pg_rhos = torch.clamp(rhos, max=clip_pg_rho_threshold)
    pg_advantages = pg_rhos * (_one_step_target(rewards, later_vs, terminated, gamma) - values)
    return vs, pg_advantages


def retrace(
    rewards: torch.Tensor,
    q_taken: torch.Tensor,
    next_expected_q: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    log_rhos: torch.Tensor,
    gamma: Scalar,
    lmbda: Scalar = 1.0,
) -> torch.Tensor:
    """Retrace(λ) targets for ``Q(s_t, a_t)`` (Munos et al. 2016, eq. 3), recursively:

    ``G_t = r_t + γ (1 - term_t) E_π Q(s'_t, ·) + γ (1 - done_t) c_{t+1} (G_{t+1} - Q(s_{t+1}, a_{t+1}))``
    with ``c_t = λ min(1, π(a_t|s_t) / μ(a_t|s_t))``; the trace stops at episode and window ends.

    Args:
        rewards: ``[T, ...]`` floats.
        q_taken: ``[T, ...]`` ``Q(s_t, a_t)`` for the actions taken.
        next_expected_q: ``[T, ...]`` ``Σ_a π(a|s'_t) Q(s'_t, a)`` (from ``final_obs`` on a
            truncated step).
        terminated, truncated: ``[T, ...]`` bool.
        log_rhos: ``[T, ...]`` ``log π(a_t|s_t) - log μ(a_t|s_t)``.
        gamma, lmbda: in [0, 1].

    Returns:
        ``[T, ...]`` Retrace targets (detach them before regressing ``Q`` onto them).
    """
    _check_time_major(
        {
            "rewards": rewards,
            "q_taken": q_taken,
            "next_expected_q": next_expected_q,
            "log_rhos": log_rhos,
        },
        {"terminated": terminated, "truncated": truncated},
    )
    _check_rate("gamma", gamma, "rewards", rewards)
    _check_rate("lmbda", lmbda, "rewards", rewards)
    one_step = _one_step_target(rewards, next_expected_q, terminated, gamma)
    traces = lmbda * torch.clamp(torch.exp(log_rhos), max=1.0)
    zero = torch.zeros_like(rewards[0])
    # Past the window's end there is no next step: its trace is 0, so the trace stops at T - 1.
    continuations = gamma * _continues(terminated | truncated, rewards) * _next_in_window(traces, zero)
    next_q_taken = _next_in_window(q_taken, zero)

    def step(later_target: torch.Tensor, x: tuple[torch.Tensor, ...]):
        one_step_target, continuation, next_q = x
        target = one_step_target + continuation * (later_target - next_q)
        return target, target

    _, targets = scan(step, zero, (one_step, continuations, next_q_taken), reverse=True)
    return targets
