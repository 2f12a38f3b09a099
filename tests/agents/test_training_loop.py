"""The outer loop every agent shares (``funrl.agents.common``): one compile path, one seed without
vmap, and the non-finite check over every metric."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from funrl import control, random, tree
from funrl.agents import common, dqn

TINY = dqn.DQNConfig(env_id="CartPole-v1", total_steps=64, learning_starts=16, buffer_size=64, batch_size=8)


def test_make_step_compiles_one_static_full_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []

    def fake_compile(fn: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return fn

    monkeypatch.setattr(control, "compile", fake_compile)
    agent = dqn.make_train(TINY)
    common.make_step(agent, batched=False, compile=False)
    assert calls == []
    common.make_step(agent, batched=True, compile=True)
    common.make_step(agent, batched=False, compile=True, mode="reduce-overhead")
    static = {"fullgraph": True, "dynamic": False, "device": agent.device, "saved_refs": {"agent": agent}}
    assert [{k: v for k, v in call.items() if k != "saved_as"} for call in calls] == [
        {**static, "mode": None},
        {**static, "mode": "reduce-overhead"},
    ]
    # saved for later processes under a name that holds the agent's static key and the batching
    assert all(call["saved_as"] is not None and repr(agent.static_key) in call["saved_as"] for call in calls)
    assert calls[0]["saved_as"] != calls[1]["saved_as"]


def test_one_seed_of_a_vmapped_run_steps_unbatched_and_keeps_the_seed_dimension(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``funrl train --seeds 1`` trains a ``[1, 2]`` key: the step is made without vmap, while
    callbacks, metrics and the returned state keep the seed dimension; the numbers are those of
    seed 0 of a two-seed vmapped run."""
    made: list[bool] = []
    real_make_step = common.make_step

    def spy(agent: Any, batched: bool, *args: Any, **kwargs: Any) -> Any:
        made.append(batched)
        return real_make_step(agent, batched, *args, **kwargs)

    monkeypatch.setattr(common, "make_step", spy)
    agent = dqn.make_train(TINY)
    seen: list[tuple[list[int], list[int]]] = []

    def callback(update: int, state_and_key: Any, host: dict[str, Any]) -> None:
        state, run_key = state_and_key
        seen.append((list(state.update_count.shape), list(run_key.shape)))

    one, metrics = common.train(
        agent, common.seed_keys(0, 1), compile=False, num_updates=6, callback=callback, log_every=3
    )
    two, _ = common.train(agent, common.seed_keys(0, 2), compile=False, num_updates=6)
    assert made == [False, True]
    assert seen == [([1], [1, 2]), ([1], [1, 2])]
    assert {list(v.shape)[1] for v in metrics.values()} == {1}
    for a, b in zip(tree.leaves(one), tree.leaves(two), strict=True):
        assert a.shape[0] == 1
        if a.is_floating_point():
            torch.testing.assert_close(a[0], b[0], rtol=1e-5, atol=1e-5)
        else:
            assert torch.equal(a[0], b[0])


def test_check_finite_covers_every_metric_but_those_that_may_be_nan() -> None:
    nan = float("nan")
    fine = {"loss": torch.ones(3, 2), "episode_return": torch.full((3, 2), nan)}
    common.check_finite(fine, first_update=1)
    with pytest.raises(common.NonFiniteError, match=r"non-finite episode_return \(nan\) at update 1, seed 0"):
        common.check_finite(fine, first_update=1, may_be_nan=frozenset())
    new_metric = {**fine, "any_new_metric": torch.tensor([[0.0, 0.0], [0.0, 0.0], [0.0, -float("inf")]])}
    with pytest.raises(
        common.NonFiniteError, match=r"non-finite any_new_metric \(-inf\) at update 7, seed 1"
    ):
        common.check_finite(new_metric, first_update=5)
    with pytest.raises(common.NonFiniteError, match=r"non-finite grad_norm \(nan\) at update 2, seed 0"):
        common.check_finite({"grad_norm": torch.tensor([1.0, nan])}, first_update=1)


def test_check_finite_allows_nan_only_in_the_updates_before_learning_starts() -> None:
    nan, inf = float("nan"), float("inf")
    # Updates 3..6 of two seeds; updates up to 4 train nothing.
    waiting = {"loss": torch.tensor([[nan, nan], [nan, nan], [1.0, 2.0], [3.0, 4.0]])}
    common.check_finite(waiting, first_update=3, warmup_updates=4)
    with pytest.raises(common.NonFiniteError, match=r"non-finite loss \(nan\) at update 3, seed 0"):
        common.check_finite(waiting, first_update=3, warmup_updates=2)
    late = {"loss": torch.tensor([[nan, nan], [nan, 1.0]])}
    with pytest.raises(common.NonFiniteError, match=r"non-finite loss \(nan\) at update 5, seed 0"):
        common.check_finite(late, first_update=4, warmup_updates=4)
    with pytest.raises(common.NonFiniteError, match=r"non-finite loss \(inf\) at update 1, seed 1"):
        common.check_finite({"loss": torch.tensor([[nan, inf]])}, first_update=1, warmup_updates=4)
    common.check_finite({"loss": torch.tensor([nan, nan])}, first_update=1, warmup_updates=2)


@given(learning_starts=st.integers(0, 5000), steps_per_update=st.integers(1, 64))
def test_warmup_updates_end_where_the_buffer_first_holds_more_than_learning_starts(
    learning_starts: int, steps_per_update: int
) -> None:
    """Update ``u`` (from 1) learns exactly when ``u * steps_per_update > learning_starts``
    (CleanRL's ``global_step > learning_starts``)."""
    warmup = common.warmup_updates(learning_starts, steps_per_update)
    for u in range(max(1, warmup - 2), warmup + 3):
        assert (u > warmup) == (u * steps_per_update > learning_starts), u


def _counted_gradient_step(calls: list[int]):
    """A gradient step that counts its calls; its metrics include ``w_sum``, which a waiting
    update reports too."""

    def gradient_step(carry: dict[str, torch.Tensor], step_key: torch.Tensor):
        calls.append(1)
        new = {"w": carry["w"] - 0.1 * step_key[0].float(), "n": carry["n"] + 1}
        return new, {"loss": new["w"].square().sum(), "seen": step_key[1].float(), "w_sum": new["w"].sum()}

    return gradient_step


@pytest.mark.parametrize("learning", [False, True])
def test_gradient_phase_skips_its_steps_eagerly_and_keeps_the_carry_when_traced(learning: bool) -> None:
    calls: list[int] = []
    gradient_step = _counted_gradient_step(calls)
    carry = {"w": torch.tensor([1.0, -2.0]), "n": torch.tensor(0)}
    keys = torch.tensor([[1, 2], [3, 4], [5, 6]])

    def phase(carry: dict[str, torch.Tensor]):
        return common.gradient_phase(
            torch.tensor(learning), gradient_step, carry, keys, ("loss", "seen", "w_sum"),
            waiting_metrics=lambda c: {"w_sum": c["w"].sum()},
        )  # fmt: skip

    eager = phase(carry)
    assert len(calls) == (3 if learning else 0)
    if learning:
        final, step_metrics = control.scan(gradient_step, carry, keys)
        assert tree.tree_equal(eager, (final, {k: v.mean() for k, v in step_metrics.items()}))
    else:
        assert tree.tree_equal(eager[0], carry)
        assert torch.isnan(eager[1]["loss"]) and torch.isnan(eager[1]["seen"])
        assert eager[1]["w_sum"] == -1.0

    # Traced (vmap over a batch of one): the steps run, and their result is dropped while waiting.
    calls.clear()
    batched = torch.func.vmap(phase)(tree.map(lambda x: x.unsqueeze(0), carry))
    assert len(calls) == 3
    torch.testing.assert_close(tree.index(batched, 0), eager, rtol=0, atol=0, equal_nan=True)


def test_update_keys_are_the_rows_of_one_split() -> None:
    key = random.key(7)
    rollout_key, step_keys = common.update_keys(key, 4)
    rows = random.split(key, 5)
    assert torch.equal(rollout_key, rows[0]) and torch.equal(step_keys, rows[1:])
    rollout_key, step_keys = common.update_keys(key, 4, keys_per_step=3)
    rows = random.split(key, 13)
    assert step_keys.shape == (4, 3, 2)
    assert torch.equal(rollout_key, rows[0]) and torch.equal(step_keys[2, 1], rows[1 + 2 * 3 + 1])
