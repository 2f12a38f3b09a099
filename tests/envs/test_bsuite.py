"""bsuite tasks: step-by-step conformance with pip ``bsuite`` (its state set from ours each step),
purity, vmap = loop, compile = eager, auto-reset ``final_obs`` and bad input."""

from __future__ import annotations

import dataclasses
import os
import warnings

import numpy as np
import pytest
import torch
from env_rollouts import random_rollout, vmapped_reset_equals_loop
from hypothesis import given, settings
from hypothesis import strategies as st

import funrl.envs.bsuite  # noqa: F401  (registers the ids)
from funrl import control, random
from funrl import tree as ftree
from funrl.envs import make

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from bsuite.environments import catch as bs_catch
    from bsuite.environments import deep_sea as bs_deep_sea
    from bsuite.environments import discounting_chain as bs_discounting
    from bsuite.environments import memory_chain as bs_memory
    from bsuite.environments import umbrella_chain as bs_umbrella

# Each example replays whole episodes against the original: a few seeds cover every branch.
CONFORMANCE = settings(max_examples=6)

# The compiled-vs-eager checks here capture every env in one full graph and run it through
# inductor with funrl's options (funrl.control.compile), as users compile. On a slow machine
# FUNRL_TEST_COMPILE_BACKEND=aot_eager keeps the capture and functionalisation but skips code
# generation (~25-100 CPU-s here).
COMPILE_BACKEND = os.environ.get("FUNRL_TEST_COMPILE_BACKEND", "inductor")

IDS = [
    "Catch-bsuite",
    "DeepSea-bsuite",
    "MemoryChain-bsuite",
    "UmbrellaChain-bsuite",
    "DiscountingChain-bsuite",
]


def random_action(env, params, key: torch.Tensor) -> torch.Tensor:
    return env.action_space(params).sample(key)


def episode_pairs(env_id: str, seed: int, steps: int, **kwargs):
    """Yield (state_before, action, step_env outputs) along a random run with auto-reset."""
    env, params = make(env_id, **kwargs)
    key = random.key(seed)
    _, state = env.reset(random.fold_in(key, 0), params)
    for t in range(steps):
        k_act, k_step = random.split(random.fold_in(key, t + 1))
        action = random_action(env, params, k_act)
        raw = env.step_env(k_step, state, action, params)
        yield state, action, raw
        state = env.step(k_step, state, action, params)[1]


def start_original(orig) -> None:
    orig.reset()
    orig._reset_next_step = False


# ------------------------------------------------------------------------------------------------
# Conformance, step by step
# ------------------------------------------------------------------------------------------------


@CONFORMANCE
@given(seed=st.integers(0, 2**31 - 1))
def test_catch_matches_bsuite(seed: int) -> None:
    orig = bs_catch.Catch(rows=10, columns=5, seed=0)
    ends = 0
    for state, action, (obs, _, reward, terminated, truncated, _) in episode_pairs("Catch-bsuite", seed, 30):
        start_original(orig)
        orig._ball_x, orig._ball_y, orig._paddle_x = int(state.ball_x), int(state.ball_y), int(state.paddle_x)
        ts = orig.step(int(action))
        np.testing.assert_array_equal(obs.numpy(), ts.observation)
        assert float(reward) == ts.reward and bool(terminated) == ts.last() and not bool(truncated)
        ends += int(ts.last())
    assert ends >= 2


def test_catch_reset_matches_bsuite_distribution() -> None:
    env, params = make("Catch-bsuite", rows=6, columns=7)
    obs, state = torch.func.vmap(env.reset, in_dims=(0, None))(random.split(random.key(0), 700), params)
    counts = torch.bincount(state.ball_x, minlength=7)
    assert counts.sum() == 700 and bool((counts > 60).all())  # uniform over the 7 columns
    assert bool((state.paddle_x == 3).all()) and bool((state.ball_y == 0).all())
    ref = bs_catch.Catch(rows=6, columns=7, seed=0).reset().observation
    np.testing.assert_array_equal(obs[0, 1:].numpy(), ref[1:])  # empty middle rows, same paddle row
    assert ref[0].sum() == 1 and bool((obs[:, 0].sum(-1) == 1).all())  # one ball in the top row


@pytest.mark.parametrize("size", [4, 10])
@CONFORMANCE
@given(seed=st.integers(0, 2**31 - 1))
def test_deep_sea_matches_bsuite(size: int, seed: int) -> None:
    env, params = make("DeepSea-bsuite", size=size, mapping_seed=seed % 7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        orig = bs_deep_sea.DeepSea(size=size, deterministic=True, seed=0, mapping_seed=0)
    orig._action_mapping = params.action_mapping.numpy()
    ends = 0
    for state, action, (obs, _, reward, terminated, _, _) in episode_pairs(
        "DeepSea-bsuite", seed, 3 * size, size=size, mapping_seed=seed % 7
    ):
        start_original(orig)
        orig._row, orig._column = int(state.row), int(state.column)
        ts = orig.step(int(action))
        np.testing.assert_array_equal(obs.numpy(), ts.observation)
        assert float(reward) == pytest.approx(ts.reward, abs=1e-7) and bool(terminated) == ts.last()
        ends += int(ts.last())
    assert ends >= 2


def test_deep_sea_optimal_policy_earns_bsuite_optimal_return() -> None:
    env, params = make("DeepSea-bsuite", size=8, mapping_seed=3)
    obs, state = env.reset(random.key(0), params)
    total = 0.0
    for t in range(8):
        action = params.action_mapping[state.row, state.column]
        obs, state, reward, terminated, *_ = env.step_env(random.key(t), state, action, params)
        total += float(reward)
    assert bool(terminated) and total == pytest.approx(0.99, abs=1e-6) and float(obs.sum()) == 0.0


def test_deep_sea_stochastic_moves_fail_with_probability_one_over_n() -> None:
    env, params = make("DeepSea-bsuite", size=5, deterministic=False, randomize_actions=False)
    _, state = env.reset(random.key(0), params)
    keys = random.split(random.key(1), 4000)
    _, nxt, reward, *_ = torch.func.vmap(env.step_env, in_dims=(0, None, None, None))(
        keys, state, torch.tensor(1), params
    )
    failed = (nxt.column == 0).float().mean()
    assert abs(float(failed) - 0.2) < 0.03
    # No noise off the end columns of the last row: the reward is exactly the move cost.
    assert torch.all(reward == torch.tensor(-0.01 / 5))


@pytest.mark.parametrize("memory_length, num_bits", [(1, 1), (5, 1), (4, 3)])
@CONFORMANCE
@given(seed=st.integers(0, 2**31 - 1))
def test_memory_chain_matches_bsuite(memory_length: int, num_bits: int, seed: int) -> None:
    orig = bs_memory.MemoryChain(memory_length=memory_length, num_bits=num_bits, seed=0)
    kw = dict(memory_length=memory_length, num_bits=num_bits)
    ends = 0
    for state, action, (obs, _, reward, terminated, _, _) in episode_pairs(
        "MemoryChain-bsuite", seed, 20, **kw
    ):
        start_original(orig)
        orig._context = state.context.numpy().copy()
        orig._query, orig._timestep = int(state.query), int(state.time)
        ts = orig.step(int(action))
        np.testing.assert_array_equal(obs.numpy(), ts.observation.reshape(-1))
        assert float(reward) == ts.reward and bool(terminated) == ts.last()
        ends += int(ts.last())
    assert ends >= 2


@pytest.mark.parametrize("chain_length, n_distractor", [(3, 0), (10, 2)])
@CONFORMANCE
@given(seed=st.integers(0, 2**31 - 1))
def test_umbrella_chain_matches_bsuite(chain_length: int, n_distractor: int, seed: int) -> None:
    orig = bs_umbrella.UmbrellaChain(chain_length=chain_length, n_distractor=n_distractor, seed=0)
    kw = dict(chain_length=chain_length, n_distractor=n_distractor)
    ends = 0
    for state, action, (obs, _, reward, terminated, _, _) in episode_pairs(
        "UmbrellaChain-bsuite", seed, 25, **kw
    ):
        start_original(orig)
        orig._need_umbrella, orig._has_umbrella = int(state.need_umbrella), int(state.has_umbrella)
        orig._timestep = int(state.time)
        ts = orig.step(int(action))
        np.testing.assert_array_equal(obs[:3].numpy(), ts.observation[0, :3])  # distractors: random bits
        assert set(obs[3:].tolist()) <= {0.0, 1.0}
        assert bool(terminated) == ts.last()
        if ts.last():
            assert float(reward) == ts.reward
        else:
            assert float(reward) in (-1.0, 1.0)
        ends += int(ts.last())
    assert ends >= 2


@pytest.mark.parametrize("mapping_seed", [0, 3, 7])
def test_discounting_chain_matches_bsuite(mapping_seed: int) -> None:
    orig = bs_discounting.DiscountingChain(mapping_seed=mapping_seed)
    rewards_seen = 0.0
    for state, action, (obs, _, reward, terminated, _, _) in episode_pairs(
        "DiscountingChain-bsuite", mapping_seed, 230, mapping_seed=mapping_seed
    ):
        start_original(orig)
        orig._context, orig._timestep = int(state.context), int(state.time)
        ts = orig.step(int(action))
        np.testing.assert_allclose(obs.numpy(), ts.observation.reshape(-1), rtol=1e-7)
        assert float(reward) == pytest.approx(ts.reward, abs=1e-6) and bool(terminated) == ts.last()
        rewards_seen += float(reward)
    assert rewards_seen > 1.0


# ------------------------------------------------------------------------------------------------
# Generic invariants, every registered bsuite id
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("env_id", IDS)
@settings(max_examples=5)
@given(seed=st.integers(0, 2**31 - 1))
def test_purity(env_id: str, seed: int) -> None:
    assert ftree.tree_equal(random_rollout(env_id, seed, 12), random_rollout(env_id, seed, 12))


@pytest.mark.parametrize("env_id", IDS)
def test_vmap_equals_loop_and_spaces(env_id: str) -> None:
    env, params = make(env_id)
    n = 6
    keys = random.split(random.key(9), n)
    obs, state, loop_states = vmapped_reset_equals_loop(env, params, keys)
    space = env.observation_space(params)
    assert obs.shape == (n,) + tuple(space.shape) and obs.dtype == space.dtype
    step = torch.func.vmap(env.step, in_dims=(0, 0, 0, None))
    for t in range(15):
        k_act, k_step = random.split(random.fold_in(random.key(3), t))
        acts = random.randint(k_act, (n,), 0, env.action_space(params).n)
        step_keys = random.split(k_step, n)
        out = step(step_keys, state, acts, params)
        ref = [env.step(step_keys[i], loop_states[i], acts[i], params) for i in range(n)]
        assert ftree.tree_equal(out, ftree.stack(ref))
        assert bool(space.contains(out[0])) and bool(space.contains(out[5]["final_obs"]))
        assert out[2].dtype == torch.float32 and out[3].dtype == torch.bool and out[4].dtype == torch.bool
        state, loop_states = out[1], [r[1] for r in ref]


@pytest.mark.parametrize(
    "env_id, kwargs",
    [(i, {}) for i in IDS]
    + [("DiscountingChain-bsuite", {"max_episode_steps": 7}), ("Catch-bsuite", {"max_episode_steps": 4})],
)
def test_auto_reset_keeps_final_obs_on_the_ending_step(env_id: str, kwargs: dict) -> None:
    env, params = make(env_id, **kwargs)
    _, state = env.reset(random.key(0), params)
    ended = 0
    for t in range(120):
        key = random.fold_in(random.key(1), t)
        action = random_action(env, params, random.fold_in(key, 1))
        obs, nxt, reward, terminated, truncated, info = env.step(key, state, action, params)
        k_step, k_reset = random.split(key)
        raw = env.step_env(k_step, state, action, params)
        assert torch.equal(info["final_obs"], raw[0]) and torch.equal(reward, raw[2])
        assert bool(terminated == raw[3]) and bool(truncated == raw[4])
        if bool(terminated | truncated):
            ended += 1
            reset_obs, reset_state = env.reset(k_reset, params)
            assert torch.equal(obs, reset_obs) and ftree.tree_equal(nxt, reset_state)
        else:
            assert torch.equal(obs, raw[0]) and ftree.tree_equal(nxt, raw[1])
        state = nxt
    assert ended >= 1
    if "max_episode_steps" in kwargs:
        assert bool(truncated) or ended >= 2


def test_truncation_at_the_time_limit() -> None:
    env, params = make("DiscountingChain-bsuite", max_episode_steps=7)
    _, state = env.reset(random.key(0), params)
    flags = []
    for t in range(14):
        _, state, _, terminated, truncated, _ = env.step(random.key(t), state, torch.tensor(2), params)
        flags.append((bool(terminated), bool(truncated)))
    assert flags == ([(False, False)] * 6 + [(False, True)]) * 2


@pytest.mark.slow
def test_compiled_equals_eager_for_every_bsuite_task() -> None:
    """All five tasks stepped (vmapped, with auto-reset) inside one compiled graph: one compile."""
    made = [make(env_id) for env_id in IDS]
    n = 4

    def step_all(keys, states, actions):
        return [
            torch.func.vmap(env.step, in_dims=(0, 0, 0, None))(keys, state, action, params)
            for (env, params), state, action in zip(made, states, actions, strict=True)
        ]

    keys0 = random.split(random.key(0), n)
    states = [torch.func.vmap(env.reset, in_dims=(0, None))(keys0, params)[1] for env, params in made]
    # vmap returns unbatched constants as stride-0 expansions; dense states avoid a recompile.
    states = ftree.map(torch.Tensor.contiguous, states)
    if COMPILE_BACKEND == "inductor":
        compiled = control.compile(step_all)
    else:
        compiled = torch.compile(step_all, backend=COMPILE_BACKEND, fullgraph=True)
    eager_states = compiled_states = states
    for t in range(12):
        keys = random.split(random.fold_in(random.key(1), t), n)
        k_act = random.fold_in(random.key(2), t)
        actions = [random.randint(k_act, (n,), 0, env.action_space(params).n) for env, params in made]
        e = step_all(keys, eager_states, actions)
        c = compiled(keys, compiled_states, actions)
        assert ftree.tree_equal(e, c), t
        eager_states, compiled_states = [o[1] for o in e], [o[1] for o in c]


# ------------------------------------------------------------------------------------------------
# Bad input
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("env_id", IDS)
def test_bad_action_is_named(env_id: str) -> None:
    env, params = make(env_id)
    _, state = env.reset(random.key(0), params)
    with pytest.raises(TypeError, match="action: expected an integer tensor"):
        env.step(random.key(1), state, torch.tensor(1.0), params)
    with pytest.raises(ValueError, match=r"action: expected shape \[\]"):
        env.step(random.key(1), state, torch.tensor([1, 0]), params)
    with pytest.raises(TypeError, match="action: expected a torch.Tensor"):
        env.step(random.key(1), state, 1, params)


@pytest.mark.parametrize(
    "env_id, kwargs, match",
    [
        ("Catch-bsuite", {"rows": 1}, "rows: expected at least 2"),
        ("Catch-bsuite", {"columns": 0}, "columns: expected a positive int"),
        ("DeepSea-bsuite", {"size": -3}, "size: expected a positive int"),
        ("MemoryChain-bsuite", {"num_bits": 0}, "num_bits: expected a positive int"),
        ("UmbrellaChain-bsuite", {"n_distractor": -1}, "n_distractor: expected a non-negative int"),
        ("DiscountingChain-bsuite", {"mapping_seed": 1.5}, "mapping_seed: expected an int"),
    ],
)
def test_bad_options_are_named(env_id: str, kwargs: dict, match: str) -> None:
    with pytest.raises((ValueError, TypeError), match=match):
        make(env_id, **kwargs)


def test_registry_lists_the_bsuite_ids_and_params_are_frozen() -> None:
    from funrl.envs import registry

    assert set(IDS) <= set(registry())
    _, params = make("Catch-bsuite")
    with pytest.raises(dataclasses.FrozenInstanceError):
        params.rows = 3  # type: ignore[misc]
