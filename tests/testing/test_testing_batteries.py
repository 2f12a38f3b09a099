"""The invariant batteries: a reference passes, and every invariant fails on a planted bug, named
in the battery's message with a counter-example. funrl's own estimators, losses and buffers run
the batteries in their own tests (tests/losses, tests/buffers)."""

from __future__ import annotations

import functools
import re
from typing import NamedTuple

import pytest
import torch

from funrl import buffers, losses
from funrl import random as frandom
from funrl import tree as ftree
from funrl.buffers import Sample
from funrl.testing import (
    advantage_estimator_invariants,
    policy_loss_invariants,
    replay_buffer_invariants,
    td_target_invariants,
)
from funrl.testing.replay import chi_squared_critical_value

EXAMPLES = 15  # hypothesis cases per invariant: enough to find every planted bug below


def breaks(*invariants: str):
    """``pytest.raises`` for a battery failure that names each of ``invariants``."""
    return pytest.raises(
        AssertionError, match="".join(f"(?=[\\s\\S]*\\[{re.escape(n)}\\])" for n in invariants)
    )


# ------------------------------------------------------------------------------------- advantages


def gae_reference(
    rewards, values, next_values, terminated, truncated, gamma, lmbda, *, bootstrap, trace_cut, decay
):
    """GAE with its three ingredients exposed, so each planted bug changes exactly one."""
    deltas = rewards + gamma * bootstrap(terminated, truncated).to(rewards.dtype) * next_values - values
    advantages = torch.zeros_like(rewards)
    later = torch.zeros_like(rewards[0])
    for t in reversed(range(rewards.shape[0])):
        later = (
            deltas[t]
            + decay(gamma, lmbda) * (~trace_cut(terminated[t], truncated[t])).to(rewards.dtype) * later
        )
        advantages[t] = later
    return advantages, advantages + values


RIGHT = {
    "bootstrap": lambda term, trunc: ~term,
    "trace_cut": lambda term, trunc: term | trunc,
    "decay": lambda gamma, lmbda: gamma * lmbda,
}


def test_the_reference_with_right_ingredients_passes():  # so the plants below differ by one bug
    advantage_estimator_invariants(functools.partial(gae_reference, **RIGHT), max_examples=5)


@pytest.mark.parametrize(
    ("bug", "broken"),
    [
        ({"trace_cut": lambda term, trunc: term}, ["nothing flows across an episode end"]),
        ({"bootstrap": lambda term, trunc: torch.ones_like(term)}, ["a terminated step does not bootstrap"]),
        (
            {"bootstrap": lambda term, trunc: ~(term | trunc)},
            ["a truncated step bootstraps from its final value", "shift by a constant baseline"],
        ),
        ({"decay": lambda gamma, lmbda: lmbda}, ["lambda=1 gives the discounted return minus the value"]),
    ],
    ids=[
        "leaks-across-truncation",
        "bootstraps-terminal",
        "no-bootstrap-at-truncation",
        "decay-without-gamma",
    ],
)
def test_planted_gae_bugs_break_their_invariants(bug, broken):
    with breaks(*broken):
        advantage_estimator_invariants(
            functools.partial(gae_reference, **{**RIGHT, **bug}),
            max_examples=EXAMPLES,
            shrink=False,
            only=broken,
        )


def bootstraps_from_next_row(rewards, values, next_values, terminated, truncated, gamma, lmbda):
    """Uses ``values[t + 1]`` for ``V(s'_t)``: wrong where an episode ended (auto-reset)."""
    shifted = torch.cat([values[1:], next_values[-1:]])
    return losses.gae(rewards, values, shifted, terminated, truncated, gamma, lmbda)


def returns_without_values(*args):
    advantages, _ = losses.gae(*args)
    return advantages, advantages


def clipped_rewards(rewards, *args):
    return losses.gae(rewards.clamp(-1.0, 1.0), *args)


@pytest.mark.parametrize(
    ("fn", "broken"),
    [
        (bootstraps_from_next_row, "lambda=0 gives the one-step TD error"),
        (returns_without_values, "returns are advantages plus values"),
        (clipped_rewards, "linear in rewards"),
    ],
)
def test_more_planted_gae_bugs(fn, broken):
    with breaks(broken):
        advantage_estimator_invariants(fn, max_examples=EXAMPLES, shrink=False, only=[broken])


def leaky(rewards, values, next_values, terminated, truncated, gamma, lmbda):
    """Cuts the trace at terminated steps only: advantages leak across truncations."""
    return losses.gae(rewards, values, next_values, terminated, torch.zeros_like(truncated), gamma, lmbda)


def test_a_battery_names_every_invariant_that_broke():
    broken = [
        "lambda=1 gives the discounted return minus the value",
        "nothing flows across an episode end",
        "a truncated step bootstraps from its final value",
    ]
    with breaks(*broken) as caught:
        advantage_estimator_invariants(leaky, max_examples=EXAMPLES, shrink=False)
    assert str(caught.value).startswith(
        f"advantage_estimator_invariants: 3 of 8 invariants broke ('{broken[0]}'"
    )
    assert "first counter-example found (not shrunk)" in str(caught.value)


def test_a_leaky_gae_shrinks_to_a_small_reproducible_counter_example():
    messages = []
    for _ in range(2):
        with breaks("nothing flows across an episode end") as caught:
            advantage_estimator_invariants(
                leaky, max_examples=EXAMPLES, only=["nothing flows across an episode end"]
            )
        messages.append(str(caught.value))
    assert messages[0] == messages[1]  # derandomized: the same cases, the same counter-example
    report = messages[0]
    assert "smallest counter-example found by hypothesis" in report and "Rollout(rewards=tensor(" in report
    first_rollout = report[report.index("Rollout(rewards=tensor(") : report.index(", values=")]
    assert first_rollout.count("[") <= 1 + 3  # at most three steps of one environment


# ----------------------------------------------------------------------------------- policy losses


def ratio_and_clipped(log_prob, old_log_prob, advantages, clip_eps):
    ratio = torch.exp(log_prob - old_log_prob)
    return ratio * advantages, torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * advantages


def ppo_without_the_min(*args):
    _, clipped = ratio_and_clipped(*args)
    return -clipped.mean()


def ppo_without_the_clip(*args):
    unclipped, _ = ratio_and_clipped(*args)
    return -unclipped.mean()


def ppo_with_max(*args):
    return -torch.maximum(*ratio_and_clipped(*args)).mean()


def ppo_summed(*args):
    return -torch.minimum(*ratio_and_clipped(*args)).sum()


def ppo_normalising(log_prob, old_log_prob, advantages, clip_eps):
    return losses.ppo_clip_loss(log_prob, old_log_prob, advantages, clip_eps, normalize=True)


@pytest.mark.parametrize(
    ("fn", "broken"),
    [
        (ppo_without_the_min, "the surrogate gradient where the clip is inactive"),
        (ppo_without_the_clip, "zero gradient where the clipped ratio saturates"),
        (ppo_with_max, "the clipped objective is a pessimistic bound"),
        (ppo_summed, "on-policy ratio 1 gives the vanilla policy gradient"),
        (ppo_normalising, "scale of advantages"),
    ],
)
@pytest.mark.filterwarnings("ignore:std\\(\\). degrees of freedom:UserWarning")  # normalising one sample
def test_planted_ppo_bugs_break_their_invariants(fn, broken):
    with breaks(broken):
        policy_loss_invariants(fn, max_examples=EXAMPLES, shrink=False, only=[broken])


# ------------------------------------------------------------------------------------- TD targets


def ignores_terminated(rewards, next_q_values, terminated, truncated, gamma, n):
    return losses.n_step_q_targets(rewards, next_q_values, torch.zeros_like(terminated), truncated, gamma, n)


def ignores_gamma(rewards, next_q_values, terminated, truncated, gamma, n):
    return losses.n_step_q_targets(rewards, next_q_values, terminated, truncated, 1.0, n)


def bootstraps_from_the_mean(rewards, next_q_values, terminated, truncated, gamma, n):
    return losses.n_step_returns(rewards, next_q_values.mean(dim=-1), terminated, truncated, gamma, n)


def runs_over_truncation(rewards, next_q_values, terminated, truncated, gamma, n):
    return losses.n_step_q_targets(rewards, next_q_values, terminated, torch.zeros_like(truncated), gamma, n)


@pytest.mark.parametrize(
    ("fn", "broken"),
    [
        (ignores_terminated, "terminal masking"),
        (ignores_gamma, "gamma=0 gives the reward"),
        (bootstraps_from_the_mean, "n-step with n=1 equals one-step"),
        (runs_over_truncation, "nothing flows across an episode end"),
    ],
)
def test_planted_target_bugs_break_their_invariants(fn, broken):
    with breaks(broken):
        td_target_invariants(fn, max_examples=EXAMPLES, shrink=False, only=[broken])


# ---------------------------------------------------------------------------------- replay buffers

BUFFER_EXAMPLES = 8


def test_only_names_known_invariants():
    with pytest.raises(
        ValueError, match=r"only: expected a list of invariant names among \['terminal masking'"
    ):
        td_target_invariants(losses.n_step_q_targets, only=["terminal masks"])
    with pytest.raises(ValueError, match=r"only: expected a list of invariant names"):
        td_target_invariants(losses.n_step_q_targets, only="terminal masking")


def test_a_prioritised_buffer_needs_alpha():
    with pytest.raises(ValueError, match=r"alpha: expected the priority exponent"):
        replay_buffer_invariants(buffers.prioritised)


def samples_every_row(capacity):
    """Draws from all ``capacity`` rows, written or not."""
    inner = buffers.flat(capacity)

    def sample(state, key, batch_size):
        indices = frandom.randint(key, (batch_size,), 0, capacity)
        items = ftree.map(lambda x: x[indices], state.experience)
        return Sample(items, indices, torch.ones(batch_size))

    return inner._replace(sample=sample)


def keeps_the_first_items(capacity):
    """Stops writing once full instead of overwriting the oldest items."""
    inner = buffers.flat(capacity)

    def add(state, batch):
        free = capacity - int(state.count)
        return inner.add(state, ftree.map(lambda x: x[:free], batch)) if free > 0 else state

    return inner._replace(add=add)


def favours_early_rows(capacity):
    """Draws the smaller of two uniform rows: every stored item is reachable, not equally likely."""
    inner = buffers.flat(capacity)

    def sample(state, key, batch_size):
        first, second = (inner.sample(state, k, batch_size) for k in frandom.split(key))
        indices = torch.minimum(first.indices, second.indices)
        return Sample(ftree.map(lambda x: x[indices], state.experience), indices, first.weights)

    return inner._replace(sample=sample)


class IgnoresPriorities(NamedTuple):
    init: object
    add: object
    sample: object
    can_sample: object
    update_priorities: object


def ignores_priorities(capacity):
    inner = buffers.flat(capacity)
    return IgnoresPriorities(*inner, update_priorities=lambda state, indices, priorities: state)


@pytest.mark.parametrize(
    ("make", "broken"),
    [
        (samples_every_row, "sample only written rows"),
        (keeps_the_first_items, "FIFO overwrite order"),
        (favours_early_rows, "sampling distribution (chi-squared)"),
        (ignores_priorities, "sampling distribution (chi-squared)"),
    ],
)
def test_planted_buffer_bugs_break_their_invariants(make, broken):
    with breaks(broken):
        replay_buffer_invariants(make, alpha=0.7, max_examples=BUFFER_EXAMPLES, shrink=False, only=[broken])


@pytest.mark.parametrize(("dof", "exact"), [(1, 23.928), (5, 35.888), (20, 65.421)])
def test_chi_squared_critical_value_is_close_to_the_table(dof, exact):
    # scipy.stats.chi2.isf(1e-6, dof); the approximation errs on the side of passing a right buffer
    assert exact <= chi_squared_critical_value(dof, 1e-6) <= 1.16 * exact
