"""Invariants of Q-learning targets, one-step and n-step (Mnih et al. 2015; Sutton & Barto §7.1).

``fn`` is shaped like :func:`funrl.losses.n_step_q_targets`::

    targets = fn(rewards, next_q_values, terminated, truncated, gamma, n)

with ``rewards`` ``[T, B]``, ``next_q_values`` ``[T, B, A]`` (target-network values at ``s'_t``),
bool flags ``[T, B]``, ``gamma`` a Python float and ``n >= 1`` an int. The n-step target is
``y_t = Σ_{k<n} γ^k r_{t+k} + γ^n max_a Q(s'_{t+n-1}, a)``, cut at an episode's end (no bootstrap
if it terminated) and at the window's end. A one-step target such as
:func:`funrl.losses.q_learning_target` is checked through
``lambda r, q, term, trunc, gamma, n: q_learning_target(r, q, term, gamma)``. The invariants:

- ``terminal masking``: ``y_t = r_t`` where ``terminated_t``, whatever ``next_q_values[t]``;
- ``gamma=0 gives the reward``: ``y = r`` for every ``n``;
- ``n-step with n=1 equals one-step``: ``y_t = r_t + γ (1 - terminated_t) max_a Q(s'_t, a)``;
- ``nothing flows across an episode end``: changing the rewards and Q-values after a step where
  ``terminated | truncated`` leaves the targets up to that step unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from hypothesis import strategies as st

from funrl.testing.battery import Invariant, expect_close, run_battery
from funrl.testing.strategies import QRollout, gammas, q_trajectories

__all__ = ["one_step_q_target", "td_target_invariants"]

TargetFn = Callable[..., torch.Tensor]


def one_step_q_target(window: QRollout, gamma: float) -> torch.Tensor:
    """``r_t + γ (1 - terminated_t) max_a Q(s'_t, a)``, ``[T, B]``."""
    bootstrap = torch.where(window.terminated, 0.0, window.next_q_values.max(dim=-1).values)
    return window.rewards + gamma * bootstrap


def td_target_invariants(
    fn: TargetFn,
    *,
    max_examples: int = 50,
    only: Sequence[str] | None = None,
    shrink: bool = True,
    max_steps: int = 6,
    max_envs: int = 3,
    max_actions: int = 4,
    max_n: int = 4,
    rtol: float = 1e-5,
    atol: float = 1e-5,
) -> None:
    """Check ``fn`` (shaped like :func:`funrl.losses.n_step_q_targets`) against the invariants of
    Q-learning targets (see the module docstring).

    Each invariant is searched with ``max_examples`` hypothesis cases: float64 windows of up to
    ``max_steps`` steps, ``max_envs`` environments and ``max_actions`` actions, ``γ`` in
    ``[0, 1]`` and ``1 <= n <= max_n``. Results reproduce.

    ``only`` names the invariants to check (all by default); ``shrink=False`` reports the first
    counter-example found instead of the smallest, much faster when only detection matters.

    Raises:
        AssertionError: naming every invariant that broke, the first element that differed and
            the smallest counter-example hypothesis found.
    """

    def targets(window: QRollout, gamma: float, n: int) -> torch.Tensor:
        return fn(*window, gamma, n)

    def terminal_masking(case: tuple[QRollout, float, int, float]) -> None:
        window, gamma, n, shift = case
        y = targets(window, gamma, n)
        terminal = window.terminated
        expect_close(y, torch.where(terminal, window.rewards, y), "targets (at terminated steps)", rtol, atol)
        moved_q = torch.where(terminal.unsqueeze(-1), window.next_q_values + shift, window.next_q_values)
        moved = targets(window._replace(next_q_values=moved_q), gamma, n)
        expect_close(moved, y, f"targets (after adding {shift} to Q(s') at terminated steps)", rtol, atol)

    def gamma_zero(case: tuple[QRollout, int]) -> None:
        window, n = case
        expect_close(targets(window, 0.0, n), window.rewards, "targets", rtol, atol)

    def n_one_is_one_step(case: tuple[QRollout, float]) -> None:
        window, gamma = case
        expect_close(targets(window, gamma, 1), one_step_q_target(window, gamma), "targets", rtol, atol)

    def nothing_flows_across_an_episode_end(case: tuple[QRollout, float, int]) -> None:
        window, gamma, n = case
        y = targets(window, gamma, n)
        time = torch.arange(window.rewards.shape[0]).unsqueeze(-1)
        for step, done in enumerate(window.terminated | window.truncated):
            if not bool(done.any()):
                continue
            after = (time > step) & done
            perturbed = window._replace(
                rewards=torch.where(after, window.rewards + 1.0, window.rewards),
                next_q_values=torch.where(
                    after.unsqueeze(-1), window.next_q_values + 3.0, window.next_q_values
                ),
            )
            up_to_end = (time <= step) & done
            expect_close(
                torch.where(up_to_end, targets(perturbed, gamma, n), y),
                y,
                f"targets (after changing the data past the episode end at step {step})",
                rtol,
                atol,
            )

    windows = q_trajectories(max_steps=max_steps, max_envs=max_envs, max_actions=max_actions)
    ns = st.integers(1, max_n)
    invariants = [
        Invariant(
            "terminal masking", st.tuples(windows, gammas(), ns, st.floats(-10.0, 10.0)), terminal_masking
        ),
        Invariant("gamma=0 gives the reward", st.tuples(windows, ns), gamma_zero),
        Invariant("n-step with n=1 equals one-step", st.tuples(windows, gammas()), n_one_is_one_step),
        Invariant(
            "nothing flows across an episode end",
            st.tuples(windows, gammas(), ns),
            nothing_flows_across_an_episode_end,
        ),
    ]
    run_battery("td_target_invariants", invariants, max_examples, only, shrink)
