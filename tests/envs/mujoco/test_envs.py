"""The MuJoCo envs behind funrl's env interface: registry and options, ``check_env``, clear
errors for bad actions and gradients, ``rollout``/``vmap``/agents unchanged on them."""

from __future__ import annotations

import pytest
import torch

import funrl.envs as E
from funrl import control, random
from funrl.agents import ppo, sac
from funrl.envs import mujoco as M
from funrl.testing import assert_compile_equals_eager, check_env

ENV_IDS = [
    "HalfCheetah-v5",
    "Hopper-v5",
    "Walker2d-v5",
    "Ant-v5",
    "Humanoid-v5",
    "Swimmer-v5",
    "InvertedPendulum-v5",
    "InvertedDoublePendulum-v5",
    "Reacher-v5",
    "Pusher-v5",
]


def test_registry_lists_the_ten_ids() -> None:
    assert set(ENV_IDS) <= set(E.registry())


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_check_env(env_id: str) -> None:
    env, params = E.make(env_id)
    check_env(env, params, num_steps=12)


def test_spaces_and_dtypes() -> None:
    env, params = E.make("Humanoid-v5")
    assert env.observation_space(params).shape == (348,)
    assert env.observation_space(params).dtype == torch.float32
    space = env.action_space(params)
    assert space.shape == (17,) and space.low == -0.4 and space.high == 0.4
    obs, state = env.reset(random.key(0), params)
    assert obs.dtype == torch.float32
    assert state.physics.dtype == state.warmstart.dtype == state.derived.dtype == torch.float64
    assert state.physics.shape == (1 + env.nq + env.nv,)
    _, params = E.make(
        "Ant-v5", include_cfrc_ext_in_observation=False, exclude_current_positions_from_observation=False
    )
    assert E.make("Ant-v5")[0].observation_space(params).shape == (29,)


def test_options_are_params_fields_and_unknown_ones_are_refused() -> None:
    env, params = E.make("Hopper-v5", healthy_z_range=(0.5, 2.0), max_episode_steps=7)
    assert params.healthy_z_range == (0.5, 2.0) and params.max_steps_in_episode == 7
    assert params.frame_skip == 4 and E.make("Reacher-v5")[1].max_steps_in_episode == 50
    with pytest.raises(TypeError, match="unknown option.*render_mode"):
        E.make("Hopper-v5", render_mode="rgb_array")
    with pytest.raises(TypeError, match="xml_file is not supported.*hopper.xml"):
        E.make("Hopper-v5", xml_file="hopper.xml")
    env, params = E.make("Ant-v5", main_body="no_such_body")
    _, state = env.reset(random.key(0), params)
    with pytest.raises(ValueError, match="main_body: no body named .no_such_body. in ant.xml; bodies:"):
        env.step(random.key(1), state, torch.zeros(8), params)
    with pytest.raises(
        ValueError, match=r"main_body: expected a body id in \[0, 14\) or a body name, got 14"
    ):
        env.step(random.key(1), state, torch.zeros(8), E.make("Ant-v5", main_body=14)[1])


def test_truncation_at_the_time_limit() -> None:
    env, params = E.make("Swimmer-v5", max_episode_steps=3)
    obs, state = env.reset(random.key(0), params)
    flags = []
    for t in range(4):
        obs, state, _, terminated, truncated, info = env.step(random.key(t), state, torch.zeros(2), params)
        flags.append((bool(terminated), bool(truncated), int(state.time)))
    assert flags == [(False, False, 1), (False, False, 2), (False, True, 0), (False, False, 1)]


@pytest.mark.parametrize(
    ("action", "error", "match"),
    [
        (torch.zeros(5), ValueError, r"action: expected shape \[6\]"),
        (torch.zeros(1, 6), ValueError, r"action: expected shape \[6\]"),
        (torch.zeros(6, dtype=torch.int64), TypeError, "action: expected a floating tensor"),
        (torch.tensor([0.0, float("nan"), 0, 0, 0, 0]), ValueError, "action: expected finite values"),
        (torch.tensor([0.0, 0, float("inf"), 0, 0, 0]), ValueError, "action: expected finite values"),
        ([0.0] * 6, TypeError, "action: expected a torch.Tensor"),
    ],
)
def test_bad_actions_are_clear_errors(action, error: type, match: str) -> None:
    env, params = E.make("HalfCheetah-v5")
    _, state = env.reset(random.key(0), params)
    with pytest.raises(error, match=match):
        env.step(random.key(1), state, action, params)


def test_bad_actions_on_a_batch_stepped_as_it_is_are_clear_errors() -> None:
    # The batched view calls the env's step on the whole batch (batch_polymorphic): its checks see
    # the batch, and a NaN in one env's action is found in eager mode.
    env, params = E.make("HalfCheetah-v5")
    batched = E.vmap(env, 3)
    _, state = batched.reset(random.key(0), params)
    with pytest.raises(
        ValueError, match=r"action: expected shape \[3, 6\] \(a batch of shape \[3\]\), got \[3, 5\]"
    ):
        batched.step(random.key(1), state, torch.zeros(3, 5), params)
    with pytest.raises(TypeError, match="action: expected a floating tensor"):
        batched.step(random.key(1), state, torch.zeros(3, 6, dtype=torch.int64), params)
    nan_in_one_env = torch.zeros(3, 6)
    nan_in_one_env[1, 2] = float("nan")
    with pytest.raises(ValueError, match="action: expected finite values"):
        batched.step(random.key(1), state, nan_in_one_env, params)


def test_a_gradient_request_is_a_clear_error() -> None:
    env, params = E.make("HalfCheetah-v5")
    _, state = env.reset(random.key(0), params)

    def reward(action: torch.Tensor) -> torch.Tensor:
        return env.step(random.key(1), state, action, params)[2]

    with pytest.raises(
        RuntimeError,
        match="controls: requires a gradient, but funrl.envs.mujoco: the MuJoCo physics ops have no gradient",
    ):
        torch.func.grad(reward)(torch.zeros(6))
    action = torch.zeros(6, requires_grad=True)
    with pytest.raises(RuntimeError, match="controls: requires a gradient"):
        env.step(random.key(1), state, action, params)
    # Called directly, the op itself refuses at backward.
    controls = action.to(torch.float64)[None]
    out = torch.ops.funrl.mujoco_step(env.model_id, state.physics[None], state.warmstart[None], controls, 5)
    with pytest.raises(RuntimeError, match="the MuJoCo physics ops have no gradient"):
        out[0].sum().backward()


def test_rollout_on_a_batched_env() -> None:
    env, params = E.make("Hopper-v5")
    batched = E.vmap(env, 3)
    obs, state = batched.reset(random.key(0), params)

    def policy(key: torch.Tensor, obs: torch.Tensor) -> tuple[torch.Tensor, dict]:
        return random.uniform(key, (3, 3), torch.float32, -1.0, 1.0), {}

    carry, trajectory = E.rollout(batched, params, policy, random.key(1), (obs, state), 40)
    assert trajectory.obs.shape == (40, 3, 11) and trajectory.reward.dtype == torch.float32
    assert bool(trajectory.terminated.any()), "random play should make the hopper fall within 40 steps"
    assert carry.env_state.physics.shape == (3, 13)


def test_set_num_threads_rejects_bad_counts() -> None:
    with pytest.raises(ValueError, match="num_threads: expected a positive int, got 0"):
        M.set_num_threads(0)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_action_bounds_shared_by_every_actuator_are_floats(env_id: str) -> None:
    # One number per bound, as gymnasium's Box shows it, from which a step (ClipAction) builds the
    # bound tensors.
    space = E.make(env_id)[0].action_space()
    assert isinstance(space.low, float) and isinstance(space.high, float)


@pytest.mark.slow
def test_compiled_scan_of_resets_equals_eager() -> None:
    """A reset adds noise to the model's ``qpos0`` (and a step runs the reset on every step): built
    in the loop body, that vector was a graph constant, and inductor leaves a constant of more than
    8 elements unbound in a compiled scan's body (``_torchinductor_pyobject_tensor_data_ptr:
    non-tensor input``). HalfCheetah has the smallest such model (``nq`` = 9) and its reset runs
    no physics; a scan of two resets of one env is the smallest loop that compiles the op."""
    env, params = E.make("HalfCheetah-v5")
    assert env.nq > 8

    def two_resets(key: torch.Tensor) -> tuple:
        def one(obs: torch.Tensor, t: torch.Tensor) -> tuple:
            obs, state = env.reset(random.fold_in(key, t), params)
            return obs, state.physics

        return control.scan(one, torch.zeros(env.observation_space(params).shape), length=2)

    assert_compile_equals_eager(two_resets, random.key(1))


@pytest.mark.slow
def test_sac_and_ppo_run_one_update_on_half_cheetah() -> None:
    sac_agent = sac.make_train(
        sac.SACConfig(
            env_id="HalfCheetah-v5",
            total_steps=32,
            num_envs=2,
            num_steps=2,
            train_frequency=2,
            buffer_size=32,
            batch_size=8,
            learning_starts=4,
            hidden_sizes=(16, 16),
        )
    )
    state = sac_agent.init(random.key(0))
    for i in range(3):
        state, metrics = sac_agent.update(state, random.key(i))
    assert torch.isfinite(metrics["critic_loss"])
    ppo_agent = ppo.make_train(
        ppo.PPOConfig(
            env_id="HalfCheetah-v5",
            total_steps=32,
            num_envs=2,
            num_steps=8,
            update_epochs=1,
            num_minibatches=2,
            hidden_sizes=(16, 16),
        )
    )
    state = ppo_agent.init(random.key(0))
    state, metrics = ppo_agent.update(state, random.key(1))
    assert all(bool(torch.isfinite(v).all()) for k, v in metrics.items() if "episode" not in k)
