"""Each funrl MuJoCo env against gymnasium's env of the same id (``mujoco_conformance``): the same
observations, rewards, info terms and flags over 220 steps from the same states, and the same
reset distribution. Each case costs a few seconds on one core."""

from __future__ import annotations

import pytest
from mujoco_conformance import assert_same_distribution, reset_moments, run_side_by_side


def test_half_cheetah_matches_gymnasium() -> None:
    counts = run_side_by_side("HalfCheetah-v5", max_episode_steps=100)
    assert counts["truncated"] == 2


def test_half_cheetah_options_match_gymnasium() -> None:
    run_side_by_side(
        "HalfCheetah-v5",
        num_steps=60,
        seed=1,
        action_scale=3.0,
        forward_reward_weight=0.5,
        ctrl_cost_weight=0.3,
        reset_noise_scale=0.3,
        frame_skip=3,
        exclude_current_positions_from_observation=False,
    )


@pytest.mark.parametrize("env_id", ["HalfCheetah-v5"])
def test_reset_distribution_matches_gymnasium(env_id: str) -> None:
    gym_samples, our_samples = reset_moments(env_id)
    assert_same_distribution(gym_samples, our_samples, env_id)
