"""The batched physics ops behind the MuJoCo envs: vmap maps onto one call, the thread count
never changes a result, ``torch.compile`` keeps each op as one node (no graph break)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

import funrl.envs as E
from funrl import random
from funrl.envs.mujoco import physics
from funrl.testing import assert_trees_close, assert_vmap_equals_loop


@pytest.fixture
def restore_threads() -> Iterator[None]:
    before = physics.get_num_threads()
    yield
    physics.set_num_threads(before)


def _batch(env_id: str, num: int, seed: int = 0):
    env, params = E.make(env_id)
    keys = random.split(random.key(seed), num)
    _, states = torch.func.vmap(env.reset, in_dims=(0, None))(keys, params)
    space = env.action_space(params)
    actions = torch.stack([space.sample(random.fold_in(k, 1)) for k in keys])
    return env, params, keys, states, actions


def test_vmap_step_equals_a_loop() -> None:
    env, params, keys, states, actions = _batch("Ant-v5", 4)
    assert_vmap_equals_loop(
        lambda k, s, a: env.step(k, s, a, params), 0, keys, states, actions, rtol=0, atol=0
    )


def test_a_batched_step_is_one_physics_call(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    run_chunks = physics._run_chunks

    def counting(entry, num_envs, work):
        calls.append(num_envs)
        return run_chunks(entry, num_envs, work)

    env, params = E.make("HalfCheetah-v5")
    batched = E.vmap(env, 16)
    obs, state = batched.reset(random.key(0), params)
    monkeypatch.setattr(physics, "_run_chunks", counting)
    batched.step(random.key(1), state, torch.zeros(16, 6), params)
    assert calls == [16]
    # An env whose reset reads the simulator (a forward pass) adds one batched call for the resets.
    calls.clear()
    env, params = E.make("Reacher-v5")
    batched = E.vmap(env, 16)
    obs, state = batched.reset(random.key(0), params)
    calls.clear()
    batched.step(random.key(1), state, torch.zeros(16, 2), params)
    assert calls == [16, 16]


@pytest.mark.parametrize("env_id", ["Humanoid-v5", "HalfCheetah-v5"])
def test_thread_count_does_not_change_results(env_id: str, restore_threads: None) -> None:
    env, params, keys, states, actions = _batch(env_id, 7)
    step = torch.func.vmap(env.step, in_dims=(0, 0, 0, None))
    results = []
    for num_threads in (1, 3):
        physics.set_num_threads(num_threads)
        out, s = [], states
        for t in range(5):
            o = step(random.split(random.key(t), 7), s, actions * (t % 3 - 1), params)
            s = o[1]
            out.append(o)
        results.append(out)
    assert_trees_close(results[1], results[0], rtol=0, atol=0, name="3 threads vs 1")


def test_step_op_checks_and_layout() -> None:
    env, params, _, states, actions = _batch("Humanoid-v5", 2)
    nxt, warm, derived = physics.step(env.model_id, states.physics, states.warmstart, actions.double(), 5)
    assert nxt.shape == (2, 1 + env.nq + env.nv) and warm.shape == (2, env.nv)
    assert derived.shape == (2, 14 * 3 + 14 * 10 + 14 * 6 + 23 + 14 * 6 + 2 + 2)
    assert torch.equal(nxt[:, 0], states.physics[:, 0] + 5 * env.model.opt.timestep)
    with pytest.raises(ValueError, match="model_id: expected an id"):
        physics.step(10_000, states.physics, states.warmstart, actions.double(), 5)
    physics_, warm, controls = states.physics, states.warmstart, actions.double()
    with pytest.raises(TypeError, match="controls: expected dtype torch.float64, got torch.float32"):
        physics.step(env.model_id, physics_, warm, actions, 5)
    with pytest.raises(ValueError, match=r"controls: expected shape \[2, 17\], got \[1, 17\]"):
        physics.step(env.model_id, physics_, warm, controls[:1], 5)
    with pytest.raises(ValueError, match=r"states: expected shape \[N, 48\], got \[48\]"):
        physics.forward(env.model_id, physics_[0])
    with pytest.raises(ValueError, match="frame_skip: expected a positive int, got 0"):
        physics.step(env.model_id, physics_, warm, controls, 0)
    with pytest.raises(ValueError, match="fields: 'no_field' is not an array field"):
        physics.model_id("ant.xml", ("no_field",))
    with pytest.raises(FileNotFoundError, match="xml_file: gymnasium ships no asset 'nope.xml'"):
        physics.model_id("nope.xml")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("env_id", "ops"),
    [("Ant-v5", ["funrl.mujoco_forward", "funrl.mujoco_step"]), ("HalfCheetah-v5", ["funrl.mujoco_step"])],
)
def test_compiled_step_equals_eager_in_one_graph(env_id: str, ops: list[str]) -> None:
    """A vmapped step with auto-reset (Ant's reset runs the forward op, HalfCheetah's none): dynamo
    traces it as one graph (fake tensors through the ops' fake implementations) holding each op
    once, and the next step, from the compiled step's own output state, reuses that graph (the
    reset's state has the strides of the step's). The backend runs the graph as traced, which
    keeps the test cheap (no code generation)."""
    env, params, keys, states, actions = _batch(env_id, 2)
    step = torch.func.vmap(env.step, in_dims=(0, 0, 0, None))
    graphs: list[list[str]] = []

    def counting_backend(gm: torch.fx.GraphModule, example_inputs: list) -> object:
        graphs.append(sorted(str(n.target) for n in gm.graph.nodes if "mujoco" in str(n.target)))
        return gm.forward

    def fn(k, s, a):
        return step(k, s, a, params)

    compiled = torch.compile(fn, fullgraph=True, backend=counting_backend)
    first = compiled(keys, states, actions)
    assert_trees_close(first, fn(keys, states, actions), rtol=0, atol=0, name="first step")
    keys = random.split(random.key(1), 2)
    second = compiled(keys, first[1], actions)
    assert_trees_close(second, fn(keys, first[1], actions), rtol=0, atol=0, name="second step")
    assert graphs == [ops]
