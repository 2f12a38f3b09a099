"""InvertedPendulum-v5, as gymnasium defines it (``gymnasium/envs/mujoco/inverted_pendulum_v5.py``).

Balance a pole on a cart (``inverted_pendulum.xml``). Reward 1 per step while the pole stands;
terminates when the observation is not finite or ``|qpos[1]| > 0.2`` (then the reward is 0),
truncated after 1000 steps. Observation ``[qpos, qvel]`` (4). Reset: ``qpos0 + U(-s, s)`` and
``U(-s, s)`` velocities, ``s = reset_noise_scale``. Frame skip 2 (``dt = 0.04``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from funrl.envs.mujoco.base import MujocoEnv, MujocoParams, MujocoState, make_factory
from funrl.envs.registry import register

__all__ = ["InvertedPendulum", "InvertedPendulumParams"]


@dataclasses.dataclass(frozen=True)
class InvertedPendulumParams(MujocoParams):
    """gymnasium's keyword options of InvertedPendulum-v5 (``xml_file`` aside)."""

    frame_skip: int = 2
    reset_noise_scale: float = 0.01


class InvertedPendulum(MujocoEnv[InvertedPendulumParams]):
    """InvertedPendulum-v5: observation float32 ``[4]``, action Box ``[-3, 3]``."""

    env_id = "InvertedPendulum-v5"
    xml_file = "inverted_pendulum.xml"

    @property
    def default_params(self) -> InvertedPendulumParams:
        return InvertedPendulumParams()

    def observation_size(self, params: InvertedPendulumParams) -> int:
        return self.nq + self.nv

    def get_obs(self, state: MujocoState, params: InvertedPendulumParams) -> torch.Tensor:
        return torch.cat([self.qpos(state), self.qvel(state)], dim=-1)

    def reset_env(
        self, key: torch.Tensor, params: InvertedPendulumParams
    ) -> tuple[torch.Tensor, MujocoState]:
        return self.noisy_reset(key, params)

    def step_env(
        self, key: torch.Tensor, state: MujocoState, action: torch.Tensor, params: InvertedPendulumParams
    ) -> tuple[torch.Tensor, MujocoState, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        self.check_action(state, action, params)
        next_state = self.simulate(state, action, params)
        obs64 = self.get_obs(next_state, params)
        terminated = ~torch.isfinite(obs64).all(-1) | (obs64[..., 1].abs() > 0.2)
        reward = (~terminated).to(torch.float64)
        info = {"reward_survive": reward}
        return (
            self.to_agent(obs64),
            next_state,
            reward.to(torch.float32),
            terminated,
            self.truncated(next_state, params),
            info,
        )


register(InvertedPendulum.env_id, make_factory(InvertedPendulum, InvertedPendulumParams))
