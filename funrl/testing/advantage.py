"""Invariants of generalised advantage estimation (Schulman et al. 2016) with episode flags.

``fn`` is shaped like :func:`funrl.losses.gae`::

    advantages, returns = fn(rewards, values, next_values, terminated, truncated, gamma, lmbda)

all ``[T, B]`` time-major, ``gamma`` and ``lmbda`` Python floats. With
``δ_t = r_t + γ (1 - terminated_t) V(s'_t) - V(s_t)`` and ``done_t = terminated_t | truncated_t``,
GAE is ``A_t = δ_t + γ λ (1 - done_t) A_{t+1}`` (``A_T = 0``) and ``returns = A + V``. The
invariants below hold exactly for that definition, on rollouts drawn by
:func:`funrl.testing.strategies.trajectories` (``next_values[t] = values[t + 1]`` inside an
episode):

- ``lambda=0 gives the one-step TD error``: ``A_t = δ_t`` at every step;
- ``lambda=1 gives the discounted return minus the value``: ``A_t = G_t - V(s_t)`` with
  ``G_t`` the discounted sum of the rewards up to the episode's end or the window's end, plus
  ``γ^k V(s')`` there unless the episode terminated;
- ``returns are advantages plus values``;
- ``nothing flows across an episode end``: changing the rewards and values after a step where
  ``done`` is set leaves the advantages up to that step unchanged;
- ``a terminated step does not bootstrap``: there ``A_t = r_t - V(s_t)``, whatever ``V(s'_t)``;
- ``a truncated step bootstraps from its final value``: there ``A_t = r_t + γ V(s'_t) - V(s_t)``;
- ``linear in rewards``: ``A(r + c r') = A(r) + c A(r'; V = 0)`` (``r'``: another tensor of the
  rewards' shape);
- ``shift by a constant baseline``: adding ``b`` to every value and ``b - γ (1 - terminated_t) b``
  to every reward (shaping by a constant potential, Ng et al. 1999) leaves ``δ`` and so the
  advantages unchanged, and shifts the returns by ``b``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from hypothesis import strategies as st

from funrl.testing.battery import Invariant, expect_close, run_battery
from funrl.testing.strategies import Rollout, gammas, lambdas, trajectories

__all__ = ["advantage_estimator_invariants", "discounted_return", "one_step_td_error"]

AdvantageFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]


def one_step_td_error(rollout: Rollout, gamma: float) -> torch.Tensor:
    """``δ_t = r_t + γ (1 - terminated_t) V(s'_t) - V(s_t)``, ``[T, B]``."""
    bootstrap = torch.where(rollout.terminated, 0.0, rollout.next_values)
    return rollout.rewards + gamma * bootstrap - rollout.values


def discounted_return(rollout: Rollout, gamma: float) -> torch.Tensor:
    """``G_t``: rewards discounted to the episode's end or the window's end, where it bootstraps
    from ``V(s'_t)`` unless the episode terminated; ``[T, B]``."""
    returns = torch.empty_like(rollout.rewards)
    later = rollout.next_values[-1]  # the window's last step bootstraps from its V(s')
    for t in reversed(range(rollout.rewards.shape[0])):
        ended = rollout.terminated[t] | rollout.truncated[t]
        bootstrap = torch.where(ended, rollout.next_values[t], later)
        returns[t] = rollout.rewards[t] + gamma * torch.where(rollout.terminated[t], 0.0, bootstrap)
        later = returns[t]
    return returns


def _perturbed_after(rollout: Rollout, after: torch.Tensor) -> Rollout:
    """``rollout`` with rewards, values and next values moved where ``after`` is true, so that
    every TD error there grows (by ``1 + 2``, plus ``3 γ`` where it bootstraps)."""
    return rollout._replace(
        rewards=torch.where(after, rollout.rewards + 1.0, rollout.rewards),
        values=torch.where(after, rollout.values - 2.0, rollout.values),
        next_values=torch.where(after, rollout.next_values + 3.0, rollout.next_values),
    )


def advantage_estimator_invariants(
    fn: AdvantageFn,
    *,
    max_examples: int = 50,
    only: Sequence[str] | None = None,
    shrink: bool = True,
    max_steps: int = 8,
    max_envs: int = 3,
    rtol: float = 1e-5,
    atol: float = 1e-5,
) -> None:
    """Check ``fn`` (shaped like :func:`funrl.losses.gae`) against GAE's invariants.

    Each invariant (see the module docstring) is searched with ``max_examples`` hypothesis cases:
    float64 rollouts of up to ``max_steps`` steps and ``max_envs`` environments, ``γ`` and ``λ``
    in ``[0, 1]``. Results reproduce (``derandomize=True``, no example database).

    ``only`` names the invariants to check (all by default); ``shrink=False`` reports the first
    counter-example found instead of the smallest, much faster when only detection matters.

    Raises:
        AssertionError: naming every invariant that broke, the first element that differed and
            the smallest counter-example hypothesis found.
    """

    def advantages(rollout: Rollout, gamma: float, lmbda: float) -> tuple[torch.Tensor, torch.Tensor]:
        return fn(*rollout, gamma, lmbda)

    def lambda_zero(case: tuple[Rollout, float]) -> None:
        rollout, gamma = case
        adv, _ = advantages(rollout, gamma, 0.0)
        expect_close(adv, one_step_td_error(rollout, gamma), "advantages", rtol, atol)

    def lambda_one(case: tuple[Rollout, float]) -> None:
        rollout, gamma = case
        adv, _ = advantages(rollout, gamma, 1.0)
        expect_close(adv, discounted_return(rollout, gamma) - rollout.values, "advantages", rtol, atol)

    def returns_are_advantages_plus_values(case: tuple[Rollout, float, float]) -> None:
        rollout, gamma, lmbda = case
        adv, returns = advantages(rollout, gamma, lmbda)
        expect_close(returns, adv + rollout.values, "returns", rtol, atol)

    def nothing_flows_across_an_episode_end(case: tuple[Rollout, float, float]) -> None:
        rollout, gamma, lmbda = case
        adv, _ = advantages(rollout, gamma, lmbda)
        time = torch.arange(rollout.rewards.shape[0]).unsqueeze(-1)
        for step, done in enumerate(rollout.terminated | rollout.truncated):
            if not bool(done.any()):
                continue
            perturbed, _ = advantages(_perturbed_after(rollout, (time > step) & done), gamma, lmbda)
            up_to_end = (time <= step) & done
            expect_close(
                torch.where(up_to_end, perturbed, adv),
                adv,
                f"advantages (after changing the data past the episode end at step {step})",
                rtol,
                atol,
            )

    def terminated_does_not_bootstrap(case: tuple[Rollout, float, float, float]) -> None:
        rollout, gamma, lmbda, shift = case
        adv, _ = advantages(rollout, gamma, lmbda)
        terminal = rollout.terminated
        expected = torch.where(terminal, rollout.rewards - rollout.values, adv)
        expect_close(adv, expected, "advantages (at terminated steps)", rtol, atol)
        moved = rollout._replace(
            next_values=torch.where(terminal, rollout.next_values + shift, rollout.next_values)
        )
        moved_adv, _ = advantages(moved, gamma, lmbda)
        expect_close(
            moved_adv, adv, f"advantages (after adding {shift} to V(s') at terminated steps)", rtol, atol
        )

    def truncated_bootstraps(case: tuple[Rollout, float, float]) -> None:
        rollout, gamma, lmbda = case
        adv, _ = advantages(rollout, gamma, lmbda)
        bootstrapped = rollout.rewards + gamma * rollout.next_values - rollout.values
        expected = torch.where(rollout.truncated, bootstrapped, adv)
        expect_close(adv, expected, "advantages (at truncated steps)", rtol, atol)

    def linear_in_rewards(case: tuple[Rollout, float, float, float]) -> None:
        rollout, gamma, lmbda, scale = case
        other_rewards = rollout.values  # any tensor of the rewards' shape will do
        zeros = torch.zeros_like(rollout.values)
        adv, _ = advantages(rollout, gamma, lmbda)
        adv_other, _ = advantages(
            rollout._replace(rewards=other_rewards, values=zeros, next_values=zeros), gamma, lmbda
        )
        combined = rollout._replace(rewards=rollout.rewards + scale * other_rewards)
        adv_combined, _ = advantages(combined, gamma, lmbda)
        expect_close(adv_combined, adv + scale * adv_other, f"A(r + {scale} r')", rtol, atol)

    def shift_by_a_constant_baseline(case: tuple[Rollout, float, float, float]) -> None:
        rollout, gamma, lmbda, baseline = case
        adv, returns = advantages(rollout, gamma, lmbda)
        continues = (~rollout.terminated).to(rollout.rewards.dtype)
        shaped = Rollout(
            rollout.rewards + baseline - gamma * continues * baseline,
            rollout.values + baseline,
            rollout.next_values + baseline,
            rollout.terminated,
            rollout.truncated,
        )
        shaped_adv, shaped_returns = advantages(shaped, gamma, lmbda)
        what = f"(values shifted by {baseline}, rewards shaped to match)"
        expect_close(shaped_adv, adv, f"advantages {what}", rtol, atol)
        expect_close(shaped_returns, returns + baseline, f"returns {what}", rtol, atol)

    rollouts = trajectories(max_steps=max_steps, max_envs=max_envs)
    constants = st.floats(-10.0, 10.0)
    invariants: list[Invariant] = [
        Invariant("lambda=0 gives the one-step TD error", st.tuples(rollouts, gammas()), lambda_zero),
        Invariant(
            "lambda=1 gives the discounted return minus the value", st.tuples(rollouts, gammas()), lambda_one
        ),
        Invariant(
            "returns are advantages plus values",
            st.tuples(rollouts, gammas(), lambdas()),
            returns_are_advantages_plus_values,
        ),
        Invariant(
            "nothing flows across an episode end",
            st.tuples(rollouts, gammas(), lambdas()),
            nothing_flows_across_an_episode_end,
        ),
        Invariant(
            "a terminated step does not bootstrap",
            st.tuples(rollouts, gammas(), lambdas(), constants),
            terminated_does_not_bootstrap,
        ),
        Invariant(
            "a truncated step bootstraps from its final value",
            st.tuples(rollouts, gammas(), lambdas()),
            truncated_bootstraps,
        ),
        Invariant(
            "linear in rewards", st.tuples(rollouts, gammas(), lambdas(), constants), linear_in_rewards
        ),
        Invariant(
            "shift by a constant baseline",
            st.tuples(rollouts, gammas(), lambdas(), constants),
            shift_by_a_constant_baseline,
        ),
    ]
    run_battery("advantage_estimator_invariants", invariants, max_examples, only, shrink)
