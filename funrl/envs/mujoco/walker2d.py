"""Walker2d-v5, as gymnasium defines it (``gymnasium/envs/mujoco/walker2d_v5.py``).

A two-legged planar robot (``walker2d_v5.xml``, both feet with friction 0.9) walks forward. Reward
``forward_reward_weight * x_velocity + healthy_reward * is_healthy - ctrl_cost_weight * sum(a^2)``;
healthy means ``qpos[1]`` (height) inside ``healthy_z_range`` and ``qpos[2]`` (angle) inside
``healthy_angle_range`` (strict). Terminates when unhealthy (if ``terminate_when_unhealthy``),
truncated after 1000 steps. Observation ``[qpos[1:], clip(qvel, -10, 10)]`` (17). Reset:
``qpos0 + U(-s, s)`` and ``U(-s, s)`` velocities. Frame skip 4 (``dt = 0.008``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from funrl.envs.mujoco.base import MujocoEnv, MujocoParams, MujocoState, make_factory
from funrl.envs.registry import register

__all__ = ["Walker2d", "Walker2dParams"]


@dataclasses.dataclass(frozen=True)
class Walker2dParams(MujocoParams):
    """gymnasium's keyword options of Walker2d-v5 (``xml_file`` aside)."""

    frame_skip: int = 4
    forward_reward_weight: float = 1.0
    ctrl_cost_weight: float = 1e-3
    healthy_reward: float = 1.0
    terminate_when_unhealthy: bool = True
    healthy_z_range: tuple[float, float] = (0.8, 2.0)
    healthy_angle_range: tuple[float, float] = (-1.0, 1.0)
    reset_noise_scale: float = 5e-3
    exclude_current_positions_from_observation: bool = True


class Walker2d(MujocoEnv[Walker2dParams]):
    """Walker2d-v5: observation float32 ``[17]``, action Box ``[-1, 1]^6``."""

    env_id = "Walker2d-v5"
    xml_file = "walker2d_v5.xml"

    @property
    def default_params(self) -> Walker2dParams:
        return Walker2dParams()

    def observation_size(self, params: Walker2dParams) -> int:
        return self.nq + self.nv - int(params.exclude_current_positions_from_observation)

    def get_obs(self, state: MujocoState, params: Walker2dParams) -> torch.Tensor:
        skip = int(params.exclude_current_positions_from_observation)
        return torch.cat([self.qpos(state)[..., skip:], self.qvel(state).clamp(-10.0, 10.0)], dim=-1)

    def is_healthy(self, state: MujocoState, params: Walker2dParams) -> torch.Tensor:
        z, angle = self.qpos(state)[..., 1], self.qpos(state)[..., 2]
        min_z, max_z = params.healthy_z_range
        min_angle, max_angle = params.healthy_angle_range
        return (min_z < z) & (z < max_z) & (min_angle < angle) & (angle < max_angle)

    def reset_env(self, key: torch.Tensor, params: Walker2dParams) -> tuple[torch.Tensor, MujocoState]:
        return self.noisy_reset(key, params)

    def step_env(
        self, key: torch.Tensor, state: MujocoState, action: torch.Tensor, params: Walker2dParams
    ) -> tuple[torch.Tensor, MujocoState, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        self.check_action(state, action, params)
        next_state = self.simulate(state, action, params)
        x_before, x_after = self.qpos(state)[..., 0], self.qpos(next_state)[..., 0]
        x_velocity = (x_after - x_before) / self.dt(params)
        healthy = self.is_healthy(next_state, params)
        forward_reward = params.forward_reward_weight * x_velocity
        healthy_reward = healthy.to(torch.float64) * params.healthy_reward
        ctrl_cost = params.ctrl_cost_weight * self.action_square_sum(action)
        reward = forward_reward + healthy_reward - ctrl_cost
        terminated = ~healthy & params.terminate_when_unhealthy
        info = {
            "x_position": x_after,
            "z_distance_from_origin": self.qpos(next_state)[..., 1] - self.qpos0[1],
            "x_velocity": x_velocity,
            "reward_forward": forward_reward,
            "reward_ctrl": -ctrl_cost,
            "reward_survive": healthy_reward,
        }
        obs = self.to_agent(self.get_obs(next_state, params))
        return obs, next_state, reward.to(torch.float32), terminated, self.truncated(next_state, params), info


register(Walker2d.env_id, make_factory(Walker2d, Walker2dParams))
