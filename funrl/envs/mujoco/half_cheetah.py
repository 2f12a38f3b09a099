"""HalfCheetah-v5, as gymnasium defines it (``gymnasium/envs/mujoco/half_cheetah_v5.py``).

A planar cheetah (``half_cheetah.xml``) runs forward. Reward
``forward_reward_weight * x_velocity - ctrl_cost_weight * sum(action^2)`` with
``x_velocity = (qpos[0]' - qpos[0]) / dt``, ``dt = 0.01 * frame_skip``; never terminates,
truncated after 1000 steps. Observation ``[qpos[1:], qvel]`` (17; ``qpos[0]`` too when
``exclude_current_positions_from_observation=False``). Reset: ``qpos0 + U(-s, s)``,
``s * N(0, 1)`` velocities, ``s = reset_noise_scale``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from funrl.envs.mujoco.base import MujocoEnv, MujocoParams, MujocoState, make_factory
from funrl.envs.registry import register

__all__ = ["HalfCheetah", "HalfCheetahParams"]


@dataclasses.dataclass(frozen=True)
class HalfCheetahParams(MujocoParams):
    """gymnasium's keyword options of HalfCheetah-v5 (``xml_file`` aside)."""

    frame_skip: int = 5
    forward_reward_weight: float = 1.0
    ctrl_cost_weight: float = 0.1
    reset_noise_scale: float = 0.1
    exclude_current_positions_from_observation: bool = True


class HalfCheetah(MujocoEnv[HalfCheetahParams]):
    """HalfCheetah-v5: observation float32 ``[17]``, action Box ``[-1, 1]^6``."""

    env_id = "HalfCheetah-v5"
    xml_file = "half_cheetah.xml"

    @property
    def default_params(self) -> HalfCheetahParams:
        return HalfCheetahParams()

    def observation_size(self, params: HalfCheetahParams) -> int:
        return self.nq + self.nv - int(params.exclude_current_positions_from_observation)

    def get_obs(self, state: MujocoState, params: HalfCheetahParams) -> torch.Tensor:
        skip = int(params.exclude_current_positions_from_observation)
        return torch.cat([self.qpos(state)[..., skip:], self.qvel(state)], dim=-1)

    def reset_env(self, key: torch.Tensor, params: HalfCheetahParams) -> tuple[torch.Tensor, MujocoState]:
        return self.noisy_reset(key, params, qvel_noise="normal")

    def step_env(
        self, key: torch.Tensor, state: MujocoState, action: torch.Tensor, params: HalfCheetahParams
    ) -> tuple[torch.Tensor, MujocoState, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        self.check_action(state, action, params)
        next_state = self.simulate(state, action, params)
        x_before, x_after = self.qpos(state)[..., 0], self.qpos(next_state)[..., 0]
        x_velocity = (x_after - x_before) / self.dt(params)
        forward_reward = params.forward_reward_weight * x_velocity
        ctrl_cost = params.ctrl_cost_weight * self.action_square_sum(action)
        reward = forward_reward - ctrl_cost
        info = {
            "x_position": x_after,
            "x_velocity": x_velocity,
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


register(HalfCheetah.env_id, make_factory(HalfCheetah, HalfCheetahParams))
