"""Swimmer-v5, as gymnasium defines it (``gymnasium/envs/mujoco/swimmer_v5.py``).

A three-link swimmer in a viscous fluid (``swimmer.xml``) moves forward. Reward
``forward_reward_weight * x_velocity - ctrl_cost_weight * sum(a^2)`` with the velocity of
``qpos[0]``; never terminates, truncated after 1000 steps. Observation ``[qpos[2:], qvel]`` (8).
Reset: ``qpos0 + U(-s, s)`` and ``U(-s, s)`` velocities. Frame skip 4 (``dt = 0.04``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from funrl.envs.mujoco.base import MujocoEnv, MujocoParams, MujocoState, make_factory
from funrl.envs.registry import register

__all__ = ["Swimmer", "SwimmerParams"]


@dataclasses.dataclass(frozen=True)
class SwimmerParams(MujocoParams):
    """gymnasium's keyword options of Swimmer-v5 (``xml_file`` aside)."""

    frame_skip: int = 4
    forward_reward_weight: float = 1.0
    ctrl_cost_weight: float = 1e-4
    reset_noise_scale: float = 0.1
    exclude_current_positions_from_observation: bool = True


class Swimmer(MujocoEnv[SwimmerParams]):
    """Swimmer-v5: observation float32 ``[8]``, action Box ``[-1, 1]^2``."""

    env_id = "Swimmer-v5"
    xml_file = "swimmer.xml"

    @property
    def default_params(self) -> SwimmerParams:
        return SwimmerParams()

    def observation_size(self, params: SwimmerParams) -> int:
        return self.nq + self.nv - 2 * int(params.exclude_current_positions_from_observation)

    def get_obs(self, state: MujocoState, params: SwimmerParams) -> torch.Tensor:
        skip = 2 * int(params.exclude_current_positions_from_observation)
        return torch.cat([self.qpos(state)[..., skip:], self.qvel(state)], dim=-1)

    def reset_env(self, key: torch.Tensor, params: SwimmerParams) -> tuple[torch.Tensor, MujocoState]:
        return self.noisy_reset(key, params)

    def step_env(
        self, key: torch.Tensor, state: MujocoState, action: torch.Tensor, params: SwimmerParams
    ) -> tuple[torch.Tensor, MujocoState, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        self.check_action(state, action, params)
        next_state = self.simulate(state, action, params)
        xy_before, xy_after = self.qpos(state)[..., 0:2], self.qpos(next_state)[..., 0:2]
        xy_velocity = (xy_after - xy_before) / self.dt(params)
        forward_reward = params.forward_reward_weight * xy_velocity[..., 0]
        ctrl_cost = params.ctrl_cost_weight * self.action_square_sum(action)
        reward = forward_reward - ctrl_cost
        info = {
            "x_position": xy_after[..., 0],
            "y_position": xy_after[..., 1],
            "distance_from_origin": torch.linalg.vector_norm(xy_after, dim=-1),
            "x_velocity": xy_velocity[..., 0],
            "y_velocity": xy_velocity[..., 1],
            "reward_forward": forward_reward,
            "reward_ctrl": -ctrl_cost,
        }
        obs = self.to_agent(self.get_obs(next_state, params))
        return (
            obs,
            next_state,
            reward.to(torch.float32),
            self.never(state),
            self.truncated(next_state, params),
            info,
        )


register(Swimmer.env_id, make_factory(Swimmer, SwimmerParams))
