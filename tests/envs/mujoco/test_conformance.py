"""Each funrl MuJoCo env against gymnasium's env of the same id (``mujoco_conformance``): the same
observations, rewards, info terms and flags over 220 random-action steps from the same states
(float64, 1e-6 relative), episode ends included, and the same reset distribution."""

from __future__ import annotations

import numpy as np
import pytest
from mujoco_conformance import assert_same_distribution, reset_moments, run_side_by_side

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

# Random play ends episodes of these (falls, poles tipping over); the tests insist on it.
TERMINATING = {
    "Ant-v5",
    "Hopper-v5",
    "Walker2d-v5",
    "Humanoid-v5",
    "InvertedPendulum-v5",
    "InvertedDoublePendulum-v5",
}
# Short time limits: random play reaches them within the 220 steps.
TRUNCATING = {"Reacher-v5", "Pusher-v5"}


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_matches_gymnasium(env_id: str) -> None:
    counts = run_side_by_side(env_id)
    assert (counts["terminated"] > 0) == (env_id in TERMINATING), counts
    assert (counts["truncated"] > 0) == (env_id in TRUNCATING), counts


def _ant_jumps(qpos: np.ndarray, qvel: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The torso flung upward: it leaves ``healthy_z_range`` (0.2, 1.0) within a few steps."""
    qvel[2] = rng.uniform(3.0, 5.0)
    return qpos, qvel


def _hopper_near_angle_limit(qpos: np.ndarray, qvel: np.ndarray, rng: np.random.Generator):
    """Tilted near the default ``healthy_angle_range`` (-0.2, 0.2) and rotating past it."""
    qpos[2] = rng.uniform(0.15, 0.19)
    qvel[2] = rng.uniform(1.0, 2.0)
    return qpos, qvel


@pytest.mark.parametrize(
    ("env_id", "perturb", "options"),
    [
        ("Ant-v5", _ant_jumps, {}),
        (
            "Ant-v5",
            _ant_jumps,
            {"terminate_when_unhealthy": False, "main_body": "torso", "healthy_z_range": (0.3, 0.9)},
        ),
        (
            "Hopper-v5",
            _hopper_near_angle_limit,
            {"terminate_when_unhealthy": False},
        ),
    ],
    ids=["ant-jumps", "ant-jumps-no-termination", "hopper-angle-limit-no-termination"],
)
def test_unhealthy_states_match_gymnasium(env_id: str, perturb, options: dict) -> None:
    counts = run_side_by_side(env_id, num_steps=60, perturb=perturb, **options)
    assert counts["unhealthy"] > 0, counts
    assert (counts["terminated"] > 0) == options.get("terminate_when_unhealthy", True), counts


@pytest.mark.parametrize(
    ("env_id", "options"),
    [
        (
            "HalfCheetah-v5",
            {
                "forward_reward_weight": 0.5,
                "ctrl_cost_weight": 0.3,
                "reset_noise_scale": 0.3,
                "frame_skip": 3,
                "exclude_current_positions_from_observation": False,
                "max_episode_steps": 25,
            },
        ),
        (
            "Hopper-v5",
            {"healthy_state_range": (-2.0, 2.0), "healthy_z_range": (0.9, 1.5), "ctrl_cost_weight": 0.1},
        ),
        ("Walker2d-v5", {"healthy_reward": 2.0, "exclude_current_positions_from_observation": False}),
        (
            "Ant-v5",
            {
                "include_cfrc_ext_in_observation": False,
                "contact_force_range": (-0.5, 2.0),
                "contact_cost_weight": 0.01,
            },
        ),
        (
            "Humanoid-v5",
            {
                "include_cinert_in_observation": False,
                "include_cvel_in_observation": False,
                "contact_cost_range": (0.0, 1e-4),
                "exclude_current_positions_from_observation": False,
            },
        ),
        ("Swimmer-v5", {"exclude_current_positions_from_observation": False, "forward_reward_weight": 2.0}),
        ("InvertedPendulum-v5", {"reset_noise_scale": 0.1}),
        ("InvertedDoublePendulum-v5", {"healthy_reward": 3.0, "frame_skip": 2}),
        ("Reacher-v5", {"reward_dist_weight": 0.5, "reward_control_weight": 2.0}),
        ("Pusher-v5", {"reward_near_weight": 1.0, "reward_dist_weight": 0.5, "reward_control_weight": 0.2}),
    ],
    ids=lambda x: x if isinstance(x, str) else "options",
)
def test_options_match_gymnasium(env_id: str, options: dict) -> None:
    """Every keyword option is honoured as gymnasium honours it (larger actions than the space
    allows: MuJoCo clamps the controls, the control costs see the raw actions)."""
    run_side_by_side(env_id, num_steps=50, seed=1, action_scale=2.0, **options)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_reset_distribution_matches_gymnasium(env_id: str) -> None:
    gym_samples, our_samples = reset_moments(env_id, num=1000)
    assert_same_distribution(gym_samples, our_samples, env_id)
