"""Batched view (``funrl.envs.vmap``), auto-reset, and the ``rollout`` collector: eager and compiled."""

from __future__ import annotations

import pytest
import torch
from batch_steps import check_batch_steps_as_each_env_alone
from hypothesis import given
from hypothesis import strategies as st

import funrl.envs as E
from funrl import control, random
from funrl import tree as ftree
from funrl.envs import wrappers
from funrl.envs.cartpole import CartPoleState
from funrl.nets import distributions


def cartpole_state(x, x_dot, theta, theta_dot, time):
    f = lambda v: torch.tensor(v, dtype=torch.float32)  # noqa: E731
    return CartPoleState(f(x), f(x_dot), f(theta), f(theta_dot), torch.tensor(time, dtype=torch.int32))


def random_policy(num_actions: int):
    def policy(key, obs):
        action = random.randint(key, obs.shape[:-1], 0, num_actions)
        return action, {"obs_sum": obs.sum(-1)}

    return policy


# ------------------------------------------------------------------------------- auto-reset


def test_step_auto_resets_on_the_exact_step_of_termination():
    env, params = E.make("CartPole-v1")
    state = cartpole_state(2.39, 1.0, 0.0, 0.0, time=10)  # x + 0.02 * 1.0 = 2.41: beyond 2.4
    key = random.key(3)
    obs, new_state, reward, terminated, truncated, info = env.step(key, state, torch.tensor(1), params)
    raw_obs, raw_state, *_ = env.step_env(random.split(key)[0], state, torch.tensor(1), params)
    assert bool(terminated) and not bool(truncated) and float(reward) == 1.0
    torch.testing.assert_close(info["final_obs"], raw_obs, rtol=0, atol=0)
    assert float(info["final_obs"][0]) > 2.4
    assert int(new_state.time) == 0 and bool((obs.abs() < 0.05).all())
    torch.testing.assert_close(obs, env.get_obs(new_state), rtol=0, atol=0)
    # The step before: no reset, final_obs is the obs itself.
    state = cartpole_state(2.0, 1.0, 0.0, 0.0, time=10)
    obs, new_state, _, terminated, truncated, info = env.step(key, state, torch.tensor(1), params)
    assert not bool(terminated | truncated) and int(new_state.time) == 11
    torch.testing.assert_close(info["final_obs"], obs, rtol=0, atol=0)


def test_step_auto_resets_on_the_exact_step_of_truncation():
    env, params = E.make("CartPole-v1", max_episode_steps=20)
    _, state = env.reset(random.key(0), params)
    key = random.key(1)
    for t in range(1, 21):
        key, k = random.split(key)
        obs, state, _, terminated, truncated, info = env.step(k, state, torch.tensor(t % 2), params)
        assert not bool(terminated)
        assert bool(truncated) == (t == 20)
    assert int(state.time) == 0
    assert not torch.equal(info["final_obs"], obs)
    assert float(info["final_obs"].abs().max()) > 0.05 > float(obs.abs().max())


# ------------------------------------------------------------------------------ batched view


@given(seed=st.integers(0, 2**32 - 1), num_envs=st.integers(1, 9))
def test_batched_view_equals_single_envs_with_split_keys(seed, num_envs):
    env, params = E.make("CartPole-v1")
    batched = E.vmap(env, num_envs)
    key = random.key(seed)
    obs, state = batched.reset(key, params)
    keys = random.split(key, num_envs)
    for i in range(num_envs):
        assert ftree.tree_equal((obs[i], ftree.index(state, i)), env.reset(keys[i], params))
    action = random.randint(random.fold_in(key, 1), (num_envs,), 0, 2)
    out = batched.step(random.fold_in(key, 2), state, action, params)
    step_keys = random.split(random.fold_in(key, 2), num_envs)
    for i in range(num_envs):
        single = env.step(step_keys[i], ftree.index(state, i), action[i], params)
        assert ftree.tree_equal(ftree.index(out, i), single)


def test_batched_view_keeps_nested_states_info_and_per_env_params():
    # Every method of the batched view returns, per env, the wrapper's nested state, the info
    # dict and the effect of each environment's own params field exactly as the single env does.
    env, params = E.make("CartPole-v1")
    env = wrappers.EpisodeStatistics(env)
    num_envs = 3
    gravity = torch.tensor([9.8, 4.0, 20.0])
    batched = E.vmap(env, num_envs, batched_params=("gravity",))
    batched_params = E.cartpole.CartPoleParams(gravity=gravity)
    key = random.key(11)
    per_env = [E.cartpole.CartPoleParams(gravity=float(g)) for g in gravity]
    obs, state = batched.reset(key, batched_params)
    for _ in range(3):  # a few steps, so gravity moves the envs apart
        push = torch.ones(num_envs, dtype=torch.int64)
        obs, state, *_ = batched.step(random.fold_in(key, 1), state, push, batched_params)
    action = torch.tensor([0, 1, 1])
    draw = batched.draw_step(random.fold_in(key, 2), batched_params)
    outputs = {
        "draw_step": draw,
        "step_with": batched.step_with(draw, state, action, batched_params),
        "step_env": batched.step_env(random.fold_in(key, 3), state, action, batched_params),
    }
    step_keys = {
        name: random.split(random.fold_in(key, i), num_envs)
        for name, i in (("draw_step", 2), ("step_env", 3))
    }
    for i in range(num_envs):
        state_i = ftree.index(state, i)
        single = {
            "draw_step": env.draw_step(step_keys["draw_step"][i], per_env[i]),
            "step_with": env.step_with(ftree.index(draw, i), state_i, action[i], per_env[i]),
            "step_env": env.step_env(step_keys["step_env"][i], state_i, action[i], per_env[i]),
        }
        for name, out in outputs.items():
            assert ftree.structure(ftree.index(out, i)) == ftree.structure(single[name]), name
            assert ftree.tree_equal(ftree.index(out, i), single[name]), (name, i)
        # the info dict keeps the single env's keys in their order
        assert list(outputs["step_with"][-1]) == list(single["step_with"][-1])
    assert isinstance(outputs["step_with"][1], wrappers.EpisodeStatisticsState)
    assert isinstance(outputs["step_with"][1].env_state, CartPoleState)
    # The per-env gravity reached each env: the same step under shared default gravity differs.
    shared = E.vmap(env, num_envs).step_with(draw, state, action, params)
    assert not torch.equal(shared[1].env_state.theta_dot, outputs["step_with"][1].env_state.theta_dot)


POLYMORPHIC_IDS = [i for i in E.registry() if E.make(i)[0].batch_polymorphic]


def test_the_classic_control_steps_are_batch_polymorphic():
    assert {"CartPole-v1", "Pendulum-v1", "MountainCar-v0", "MountainCarContinuous-v0"} <= set(
        POLYMORPHIC_IDS
    )


@pytest.mark.parametrize("env_id", POLYMORPHIC_IDS)
def test_batched_view_steps_a_polymorphic_chain_on_the_batch_as_each_env_alone(env_id):
    # The wrapper chain agents build; episodes end (a short limit) so the drawn resets are used.
    env, params = E.make(env_id, max_episode_steps=7)
    if isinstance(env.action_space(params), E.Box):
        env = wrappers.ClipAction(env)
    env = wrappers.EpisodeStatistics(env)
    assert env.batch_polymorphic
    num_envs = 3
    batched = E.vmap(env, num_envs)
    key = random.key(5)
    obs, state = batched.reset(key, params)
    returned = check_batch_steps_as_each_env_alone(env, batched, state, params, key, steps=20)
    assert bool(torch.stack(returned).any(0).all())  # every env has ended an episode and taken its drawn reset


def test_a_wrapper_that_looks_across_its_calls_keeps_the_vmapped_step():
    # NormalizeObservation's statistics are per env under vmap; on the batch they would mix envs.
    env, params = E.make("Pendulum-v1")
    normalised = wrappers.NormalizeObservation(env)
    assert env.batch_polymorphic and not normalised.batch_polymorphic
    batched = E.vmap(normalised, 2)
    key = random.key(2)
    _, state = batched.reset(key, params)
    draw = batched.draw_step(random.fold_in(key, 1), params)
    action = torch.tensor([[2.0], [-2.0]])
    out = batched.step_with(draw, state, action, params)
    for i in range(2):
        single = normalised.step_with(ftree.index(draw, i), ftree.index(state, i), action[i], params)
        assert ftree.tree_equal(ftree.index(out, i), single)


def test_batched_view_rejects_bad_input():
    env, params = E.make("CartPole-v1")
    batched = E.vmap(env, 4)
    _, state = batched.reset(random.key(0), params)
    with pytest.raises(ValueError, match="action: expected a leading dimension num_envs=4"):
        batched.step(random.key(1), state, torch.zeros(3, dtype=torch.int64), params)
    with pytest.raises(TypeError, match="action: expected an integer tensor"):
        batched.step(random.key(1), state, torch.zeros(4), params)
    # A batch-polymorphic env stepped on the batch checks each env's action shape too.
    pendulum, pendulum_params = E.make("Pendulum-v1")
    pendulums = E.vmap(pendulum, 4)
    _, pendulum_state = pendulums.reset(random.key(0), pendulum_params)
    with pytest.raises(
        ValueError, match=r"action: expected shape \[4, 1\] \(a batch of shape \[4\]\), got \[4\]"
    ):
        pendulums.step(random.key(1), pendulum_state, torch.zeros(4), pendulum_params)
    with pytest.raises(
        ValueError, match=r"action: expected shape \[1\] \(one env; vmap for a batch\), got \[\]"
    ):
        pendulum.step(random.key(1), ftree.index(pendulum_state, 0), torch.zeros(()), pendulum_params)
    with pytest.raises(ValueError, match="num_envs"):
        E.vmap(env, 0)
    with pytest.raises(ValueError, match="batched_params"):
        E.vmap(env, 4, batched_params=("gravityy",))
    shaped_wrong = E.cartpole.CartPoleParams(gravity=torch.ones(3))
    with pytest.raises(ValueError, match=r"params.gravity: expected a tensor with leading dimension"):
        E.vmap(env, 4, batched_params=("gravity",)).reset(random.key(0), shaped_wrong)


# ----------------------------------------------------------------------------------- rollout


def manual_rollout(env, params, policy, key, obs, state, num_steps):
    """The loop ``rollout`` promises, written out."""
    records = []
    step_keys = random.split(key, 2 * num_steps)
    for t in range(num_steps):
        key_policy, key_env = step_keys[2 * t], step_keys[2 * t + 1]
        action, extras = policy(key_policy, obs)
        next_obs, state, reward, terminated, truncated, info = env.step(key_env, state, action, params)
        records.append((obs, action, reward, terminated, truncated, info["final_obs"], extras))
        obs = next_obs
    return obs, state, records


def test_rollout_equals_the_loop_it_documents():
    env, params = E.make("CartPole-v1", max_episode_steps=25)
    batched = E.vmap(env, 5)
    obs, state = batched.reset(random.key(0), params)
    policy = random_policy(2)
    (last_obs, last_state), traj = E.rollout(batched, params, policy, random.key(9), (obs, state), 40)
    ref_obs, ref_state, records = manual_rollout(batched, params, policy, random.key(9), obs, state, 40)
    assert traj.obs.shape == (40, 5, 4) and traj.action.shape == (40, 5) and traj.reward.shape == (40, 5)
    assert traj.extras["obs_sum"].shape == (40, 5) and traj.info == {}
    assert ftree.tree_equal((last_obs, last_state), (ref_obs, ref_state))
    for t, (o, a, r, term, trunc, final, extras) in enumerate(records):
        assert ftree.tree_equal(
            (traj.obs[t], traj.action[t], traj.reward[t], traj.terminated[t], traj.truncated[t]),
            (o, a, r, term, trunc),
        )
        assert ftree.tree_equal((traj.final_obs[t], traj.extras["obs_sum"][t]), (final, extras["obs_sum"]))
    # Both kinds of episode end happened, and final_obs differs from the next obs exactly there.
    done = traj.terminated | traj.truncated
    assert bool(traj.terminated.any()) and bool(traj.truncated.any())
    next_obs = torch.cat([traj.obs[1:], last_obs[None]])
    differs = (traj.final_obs != next_obs).any(-1)
    assert torch.equal(differs, done)


@pytest.mark.parametrize(
    "env_id, wrap",
    [
        ("Acrobot-v1", False),
        ("Pendulum-v1", True),
        ("Breakout-MinAtar", False),
        ("DeepSea-bsuite", False),
    ],
)
def test_rollout_drawing_ahead_equals_stepping_with_keys(env_id, wrap):
    # The rollout draws every step's env values (keys and auto-resets) and the policy's noise
    # before its loop: the trajectory is the one of drawing inside the loop, for every kind of
    # env (its own step_with in MinAtar, wrappers around the batched view).
    env, params = E.make(env_id, max_episode_steps=6)
    batched = E.vmap(env, 3)
    if wrap:
        batched = wrappers.NormalizeObservation(wrappers.EpisodeStatistics(batched))
    space = env.action_space(params)
    dist = distributions.normal if isinstance(space, E.Box) else distributions.categorical
    shape = (3, space.shape[0]) if isinstance(space, E.Box) else (3, space.n)

    def act(noise, obs):
        logits = obs.reshape(3, -1)[:, :1].float().expand(shape)
        params_ = (logits, torch.ones(shape)) if dist is distributions.normal else (logits,)
        return dist.sample_from_noise(noise, *params_), {}

    def act_with_key(key, obs):
        return act(dist.noise(key, shape), obs)

    obs, state = batched.reset(random.key(0), params)
    (last_obs, last_state), traj = E.rollout(
        batched, params, act, random.key(3), (obs, state), 10, policy_draw=lambda k: dist.noise(k, shape)
    )
    ref_obs, ref_state, records = manual_rollout(batched, params, act_with_key, random.key(3), obs, state, 10)
    assert ftree.tree_equal((last_obs, last_state), (ref_obs, ref_state))
    assert bool((traj.terminated | traj.truncated).any())
    for t, (o, a, r, term, trunc, final, _) in enumerate(records):
        assert ftree.tree_equal(
            (
                traj.obs[t],
                traj.action[t],
                traj.reward[t],
                traj.terminated[t],
                traj.truncated[t],
                traj.final_obs[t],
            ),
            (o, a, r, term, trunc, final),
        )


def test_a_shorter_rollout_takes_the_same_first_steps():
    # Step t's keys are rows 2t and 2t + 1 of one split: they do not depend on the rollout's length.
    env, params = E.make("CartPole-v1")
    batched = E.vmap(env, 3)
    obs, state = batched.reset(random.key(0), params)
    _, short = E.rollout(batched, params, random_policy(2), random.key(4), (obs, state), 5)
    _, long = E.rollout(batched, params, random_policy(2), random.key(4), (obs, state), 12)
    assert ftree.tree_equal(short, ftree.map(lambda x: x[:5], long))
    _, other = E.rollout(batched, params, random_policy(2), random.key(5), (obs, state), 5)
    assert not torch.equal(other.action, short.action)


def test_rollout_single_env_and_bad_input():
    env, params = E.make("CartPole-v1")
    obs, state = env.reset(random.key(0), params)
    (_, last_state), traj = E.rollout(env, params, random_policy(2), random.key(1), (obs, state), 8)
    assert traj.obs.shape == (8, 4) and traj.action.shape == (8,)
    with pytest.raises(ValueError, match="num_steps"):
        E.rollout(env, params, random_policy(2), random.key(1), (obs, state), 0)
    with pytest.raises(TypeError, match="state: expected the"):
        E.rollout(env, params, random_policy(2), random.key(1), state, 8)


# ---------------------------------------------------------------------------------- compiled


@pytest.mark.slow
def test_compiled_batched_step_equals_eager():
    env, params = E.make("CartPole-v1")
    batched = E.vmap(env, 64)
    obs, state = batched.reset(random.key(0), params)
    step = control.compile(batched.step)
    key = random.key(1)
    for t in range(40):
        k = random.fold_in(key, t)
        action = random.randint(random.fold_in(k, 1), (64,), 0, 2)
        eager = batched.step(k, state, action, params)
        compiled = step(k, state, action, params)
        assert ftree.tree_allclose(compiled, eager, rtol=1e-5, atol=1e-6)
        # Flags must agree exactly; the state carries on from the eager result.
        assert torch.equal(compiled[3], eager[3]) and torch.equal(compiled[4], eager[4])
        state = eager[1]


@pytest.mark.slow
def test_compiled_rollout_is_one_graph_and_equals_eager():
    env, params = E.make("CartPole-v1", max_episode_steps=30)
    batched = E.vmap(env, 8)
    obs, state = batched.reset(random.key(0), params)
    policy = random_policy(2)

    def collect(key, obs, state):
        return E.rollout(batched, params, policy, key, (obs, state), 64)

    # funrl's compile (fullgraph: a graph break is an error): plain torch.compile inlines the
    # policy's Threefry rounds into one kernel and took 170 s to compile this on a 2-core CI VM.
    compiled = control.compile(collect)
    eager_out = collect(random.key(5), obs, state)
    compiled_out = compiled(random.key(5), obs, state)
    assert ftree.tree_allclose(compiled_out, eager_out, rtol=1e-5, atol=1e-6)
    assert torch.equal(compiled_out[1].terminated, eager_out[1].terminated)
    assert torch.equal(compiled_out[1].truncated, eager_out[1].truncated)
