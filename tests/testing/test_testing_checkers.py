"""funrl.testing's checkers pass funrl's own functions and fail, with a readable message, on planted bugs."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import funrl.envs as E
from funrl import control, losses
from funrl import random as frandom
from funrl.envs.cartpole import CartPole
from funrl.testing import (
    assert_compile_equals_eager,
    assert_grad_finite,
    assert_no_recompile,
    assert_pure,
    assert_trees_close,
    assert_vmap_equals_loop,
    check_env,
)

DTYPE = torch.float64


def rollout(steps: int = 5, envs: int = 3, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    shape = (steps, envs)
    terminated = torch.rand(shape, generator=g) < 0.2
    truncated = (torch.rand(shape, generator=g) < 0.2) & ~terminated
    floats = [torch.randn(shape, generator=g, dtype=DTYPE) for _ in range(3)]
    return (*floats, terminated, truncated)


# ------------------------------------------------------------------------------ assert_trees_close


def test_trees_close_accepts_close_trees_and_equal_nans():
    tree = {"a": torch.tensor([1.0, float("nan")]), "b": (torch.tensor(3), 2.0, "tag")}
    assert_trees_close(
        tree, {"a": torch.tensor([1.0 + 1e-9, float("nan")]), "b": (torch.tensor(3), 2.0, "tag")}
    )


def test_trees_close_names_the_leaf_index_and_both_values():
    expected = {"a": torch.zeros(2, 3), "b": torch.ones(2)}
    actual = {"a": torch.zeros(2, 3), "b": torch.ones(2)}
    actual["a"][1, 2] = 0.5
    actual["a"][1, 1] = 0.25
    message = r"leaf out\['a'\] \(shape \[2, 3\]\) at index \(1, 1\): actual 0.25, expected 0.0 \(2 of 6 elements differ"
    with pytest.raises(AssertionError, match=message):
        assert_trees_close(actual, expected, name="out")


@pytest.mark.parametrize(
    ("actual", "message"),
    [
        ({"a": torch.zeros(3)}, r"leaf tree\['a'\]: actual shape \[3\], expected \[2\]"),
        ({"a": torch.zeros(2, dtype=torch.float64)}, r"actual dtype torch.float64, expected torch.float32"),
        ({"b": torch.zeros(2)}, r"tree structures differ"),
        (
            {"a": torch.zeros(2, dtype=torch.float32)[:1].expand(2) + 1},
            r"at index \(0,\): actual 1.0, expected 0.0",
        ),
    ],
)
def test_trees_close_reports_shape_dtype_structure_and_value(actual, message):
    with pytest.raises(AssertionError, match=message):
        assert_trees_close(actual, {"a": torch.zeros(2)})


def test_trees_close_compares_integers_exactly():
    with pytest.raises(AssertionError, match=r"actual 3, expected 2"):
        assert_trees_close(torch.tensor([3]), torch.tensor([2]), atol=10.0)


def test_trees_close_compares_numpy_arrays_as_tensors():
    # As gymnasium-side code (funrl's adapters, SB3) returns them: close arrays pass, a differing
    # element is named, and an array against a tensor compares by value, dtype and shape.
    obs = np.array([[0.5, 1.0], [2.0, 3.0]], dtype=np.float32)
    assert_trees_close((obs, np.array([True])), (obs + 1e-9, np.array([True])))
    assert_trees_close(obs, torch.tensor(obs))
    with pytest.raises(AssertionError, match=r"leaf obs \(shape \[2, 2\]\) at index \(1, 0\): actual 2.5"):
        assert_trees_close(obs + np.array([[0, 0], [0.5, 0]], dtype=np.float32), obs, name="obs")
    with pytest.raises(AssertionError, match=r"actual dtype torch.float64, expected torch.float32"):
        assert_trees_close(obs.astype(np.float64), obs)


# ------------------------------------------------------------------------------------ assert_pure


def test_pure_accepts_funrl_gae():
    assert_pure(losses.gae, *rollout(), 0.99, 0.95)


def test_pure_catches_an_input_written_in_place():
    def scales_in_place(x, y):
        x.mul_(2.0)
        return x + y

    with pytest.raises(
        AssertionError, match=r"modified its input in place \(first call\).*leaf inputs\[0\]\[0\]"
    ):
        assert_pure(scales_in_place, torch.ones(3), torch.ones(3))


def test_pure_catches_global_randomness():
    with pytest.raises(AssertionError, match=r"different outputs.*leaf output"):
        assert_pure(lambda x: x + torch.rand(()), torch.zeros(2))


def test_pure_catches_an_output_rewritten_by_the_next_call():
    shared = torch.zeros(2)

    def accumulates(x):
        shared.add_(x)  # hands out the same tensor each time, changed
        return shared

    with pytest.raises(AssertionError, match=r"different outputs.*actual 2.0, expected 1.0"):
        assert_pure(accumulates, torch.ones(2))


# ------------------------------------------------------------------------ assert_vmap_equals_loop


def test_vmap_equals_loop_accepts_funrl_td_error_over_envs():
    rewards, values, next_values, terminated, _ = rollout()
    assert_vmap_equals_loop(
        losses.td_error, (1, 1, 1, 1, None), rewards, values, next_values, terminated, 0.9
    )


def test_vmap_equals_loop_catches_hidden_state():
    calls = []

    def counts_calls(x):
        calls.append(1)
        return x + len(calls)

    with pytest.raises(AssertionError, match=r"member 0 of 3: vmap\(fn\) differs.*leaf output"):
        assert_vmap_equals_loop(counts_calls, 0, torch.zeros(3, 2))


def test_vmap_equals_loop_reports_a_function_vmap_cannot_run():
    with pytest.raises(AssertionError, match=r"vmap\(fn\) raised RuntimeError"):
        assert_vmap_equals_loop(lambda x: x * x.sum().item(), 0, torch.ones(3, 2))


@pytest.mark.parametrize(
    ("in_dims", "error", "message"),
    [
        ((0,), ValueError, r"in_dims: expected an int, None or one entry per argument \(2\)"),
        ((None, None), ValueError, r"in_dims: expected at least one batched argument"),
        ((0, "1"), TypeError, r"in_dims: expected entries that are ints or None"),
        ((0, 0), ValueError, r"args: expected one batch size"),
    ],
)
def test_vmap_equals_loop_rejects_bad_in_dims(in_dims, error, message):
    with pytest.raises(error, match=message):
        assert_vmap_equals_loop(torch.add, in_dims, torch.ones(3), torch.ones(4))


# -------------------------------------------------------------------- assert_compile_equals_eager


def test_compile_equals_eager_accepts_a_small_function():  # aot_eager: traced and decomposed, no codegen
    x, y = torch.randn(4), torch.randn(4)
    assert_compile_equals_eager(lambda x, y: torch.sin(x) * y + 1.0, x, y, atol=1e-6, backend="aot_eager")


def test_compile_equals_eager_catches_a_side_effect_baked_into_the_graph():
    traced = []

    def reads_a_python_list(x):
        traced.append(1)  # runs once per call eagerly, but once per trace compiled
        return x * len(traced)

    with pytest.raises(
        AssertionError, match=r"compiled differs from eager: leaf output .* actual 2.0, expected 1.0"
    ):
        assert_compile_equals_eager(reads_a_python_list, torch.ones(2), backend="eager")


def test_compile_equals_eager_reports_a_graph_break():
    def branches_on_a_value(x):
        return x + 1 if x.sum().item() > 0 else x - 1

    with pytest.raises(AssertionError, match=r"torch.compile\(fn, fullgraph=True, backend='eager'\) failed"):
        assert_compile_equals_eager(branches_on_a_value, torch.ones(2), backend="eager")


def test_compile_equals_eager_compiles_inductor_with_funrls_options(monkeypatch):
    compiled_by_funrl = []

    def spy(fn, **kwargs):  # records the call, then traces without code generation
        compiled_by_funrl.append(fn)
        return torch.compile(fn, fullgraph=True, backend="eager")

    monkeypatch.setattr(control, "compile", spy)
    draw = lambda key: frandom.uniform(key, (3,))  # noqa: E731
    assert_compile_equals_eager(draw, frandom.key(0))
    assert compiled_by_funrl == [draw]
    assert_compile_equals_eager(draw, frandom.key(0), backend="aot_eager")
    assert compiled_by_funrl == [draw]  # other backends are torch.compile's own


# ---------------------------------------------------------------------------- assert_no_recompile


def discounted_sum(rewards, gamma):
    return (rewards * gamma ** torch.arange(rewards.shape[0], dtype=rewards.dtype)).sum()


def test_no_recompile_accepts_tensor_hyper_parameters():
    rewards = torch.ones(4)
    assert_no_recompile(discounted_sum, [(rewards, torch.tensor(g)) for g in (0.9, 0.95, 0.99)])


def test_no_recompile_names_a_python_float_that_changed():
    rewards = torch.ones(4)
    message = r"call 1 of 3 compiled fn again; since call 0: args\[1\]: 0.9 \(a Python float.*-> 0.95"
    with pytest.raises(AssertionError, match=message):
        assert_no_recompile(discounted_sum, [(rewards, g) for g in (0.9, 0.95, 0.99)])


def test_no_recompile_names_a_shape_that_changed():
    gamma = torch.tensor(0.9)
    message = r"call 1 of 2 compiled fn again; since call 0: args\[0\]: torch.float32 \[4\] on cpu -> torch.float32 \[6\]"
    with pytest.raises(AssertionError, match=message):
        assert_no_recompile(discounted_sum, [(torch.ones(4), gamma), (torch.ones(6), gamma)])


def test_no_recompile_rejects_too_few_calls_and_non_tuples():
    with pytest.raises(ValueError, match=r"calls: expected at least two argument tuples, got 1"):
        assert_no_recompile(discounted_sum, [(torch.ones(4), 0.9)])
    with pytest.raises(TypeError, match=r"calls\[1\]: expected a tuple of positional arguments, got list"):
        assert_no_recompile(discounted_sum, [(torch.ones(4), 0.9), [torch.ones(4), 0.9]])


# ----------------------------------------------------------------------------- assert_grad_finite


def ppo_objective(params, batch):
    log_prob = torch.log_softmax(batch["logits"] * params["scale"], dim=-1)[..., 0]
    return losses.ppo_clip_loss(log_prob, batch["old_log_prob"], batch["advantages"], 0.2)


def test_grad_finite_accepts_a_ppo_objective():
    batch = {
        "logits": torch.randn(5, 3),
        "old_log_prob": torch.full((5,), -1.1),
        "advantages": torch.randn(5),
    }
    assert_grad_finite(ppo_objective, {"scale": torch.ones(3)}, batch)


def test_grad_finite_names_the_leaf_and_index_of_an_infinite_gradient():
    def sqrt_loss(params, x):
        return (params["w"].sqrt() * x).sum() + params["b"].sum()

    params = {"b": torch.ones(2), "w": torch.tensor([1.0, 0.0, 4.0])}
    with pytest.raises(
        AssertionError, match=r"leaf grad\['w'\] \(shape \[3\]\) at index \(1,\): inf \(1 of 3"
    ):
        assert_grad_finite(sqrt_loss, params, torch.ones(3))


def test_grad_finite_reports_a_nan_loss_and_rejects_a_non_scalar_loss():
    with pytest.raises(AssertionError, match=r"the loss is nan"):
        assert_grad_finite(lambda p, x: (p["w"] * x).sum().log(), {"w": -torch.ones(2)}, torch.ones(2))
    with pytest.raises(
        TypeError, match=re.escape("loss_fn: expected a 0-d floating loss or (loss, aux), got")
    ):
        assert_grad_finite(lambda p, x: (p["w"] * x, {}), {"w": torch.ones(2)}, torch.ones(2))


# -------------------------------------------------------------------------------------- check_env

# Every registered env passes check_env in tests/envs/test_checker.py; here, a correct env passes
# and each planted bug fails.


def test_check_env_accepts_a_correct_env():
    env, params = E.make("CartPole-v1")
    check_env(env, params, num_steps=20)


class ResetIgnoresKey(CartPole):
    def reset_env(self, key, params):
        return super().reset_env(frandom.key(0), params)


def test_check_env_catches_a_reset_that_ignores_its_key():
    env = ResetIgnoresKey()
    with pytest.raises(AssertionError, match=r"check_env: reset ignores its key"):
        check_env(env, num_steps=20)
    check_env(env, num_steps=20, random_reset=False)  # the opt-out for a fixed first state


class Float64Obs(CartPole):
    def reset_env(self, key, params):
        obs, state = super().reset_env(key, params)
        return obs.double(), state


def test_check_env_raises_envs_check_findings_as_assertions():
    with pytest.raises(
        AssertionError, match=r"check_env: reset obs: expected dtype torch.float32, got torch.float64"
    ):
        check_env(Float64Obs(), num_steps=5)
