"""InvertedDoublePendulum-v5, as gymnasium defines it
(``gymnasium/envs/mujoco/inverted_double_pendulum_v5.py``).

Balance two stacked poles on a cart (``inverted_double_pendulum.xml``). With ``(x, _, y)`` the
tip site's position (``site_xpos[0]``, as ``MjData`` holds it after a step: one substep behind
``qpos``): terminates when ``y <= 1``; reward ``healthy_reward * (not terminated) - (0.01 x^2 +
(y - 2)^2) - (0.001 qvel[1]^2 + 0.005 qvel[2]^2)``; truncated after 1000 steps. Observation
``[qpos[0], sin(qpos[1:]), cos(qpos[1:]), clip(qvel, -10, 10), clip(qfrc_constraint[0], -10, 10)]``
(9). Reset: ``qpos0 + U(-s, s)``, ``s * N(0, 1)`` velocities. Frame skip 5 (``dt = 0.05``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from funrl.envs.mujoco.base import MujocoEnv, MujocoParams, MujocoState, make_factory
from funrl.envs.registry import register

__all__ = ["InvertedDoublePendulum", "InvertedDoublePendulumParams"]


@dataclasses.dataclass(frozen=True)
class InvertedDoublePendulumParams(MujocoParams):
    """gymnasium's keyword options of InvertedDoublePendulum-v5 (``xml_file`` aside)."""

    frame_skip: int = 5
    healthy_reward: float = 10.0
    reset_noise_scale: float = 0.1


class InvertedDoublePendulum(MujocoEnv[InvertedDoublePendulumParams]):
    """InvertedDoublePendulum-v5: observation float32 ``[9]``, action Box ``[-1, 1]``."""

    env_id = "InvertedDoublePendulum-v5"
    xml_file = "inverted_double_pendulum.xml"
    derived_fields = ("site_xpos", "qfrc_constraint")

    @property
    def default_params(self) -> InvertedDoublePendulumParams:
        return InvertedDoublePendulumParams()

    def observation_size(self, params: InvertedDoublePendulumParams) -> int:
        return 9

    def get_obs(self, state: MujocoState, params: InvertedDoublePendulumParams) -> torch.Tensor:
        qpos, qvel = self.qpos(state), self.qvel(state)
        return torch.cat(
            [
                qpos[..., :1],
                torch.sin(qpos[..., 1:]),
                torch.cos(qpos[..., 1:]),
                qvel.clamp(-10.0, 10.0),
                self.field(state, "qfrc_constraint").clamp(-10.0, 10.0)[..., :1],
            ],
            dim=-1,
        )

    def reset_env(
        self, key: torch.Tensor, params: InvertedDoublePendulumParams
    ) -> tuple[torch.Tensor, MujocoState]:
        return self.noisy_reset(key, params, qvel_noise="normal")

    def step_env(
        self,
        key: torch.Tensor,
        state: MujocoState,
        action: torch.Tensor,
        params: InvertedDoublePendulumParams,
    ) -> tuple[torch.Tensor, MujocoState, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        self.check_action(state, action, params)
        next_state = self.simulate(state, action, params)
        tip = self.field(next_state, "site_xpos")[..., 0, :]
        x, y = tip[..., 0], tip[..., 2]
        terminated = y <= 1
        v1, v2 = self.qvel(next_state)[..., 1], self.qvel(next_state)[..., 2]
        dist_penalty = 0.01 * x**2 + (y - 2) ** 2
        vel_penalty = 1e-3 * v1**2 + 5e-3 * v2**2
        alive_bonus = params.healthy_reward * (~terminated).to(torch.float64)
        reward = alive_bonus - dist_penalty - vel_penalty
        info = {
            "reward_survive": alive_bonus,
            "distance_penalty": -dist_penalty,
            "velocity_penalty": -vel_penalty,
        }
        obs = self.to_agent(self.get_obs(next_state, params))
        return obs, next_state, reward.to(torch.float32), terminated, self.truncated(next_state, params), info


register(InvertedDoublePendulum.env_id, make_factory(InvertedDoublePendulum, InvertedDoublePendulumParams))
