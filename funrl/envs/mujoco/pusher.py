"""Pusher-v5, as gymnasium defines it (``gymnasium/envs/mujoco/pusher_v5.py``).

A seven-joint arm (``pusher_v5.xml``) pushes a cylinder to a goal. With the bodies' positions
after the step (``xpos``, as ``MjData`` holds it: one substep behind ``qpos``): reward
``-reward_near_weight * |object - tips_arm| - reward_dist_weight * |object - goal| -
reward_control_weight * sum(a^2)``; never terminates, truncated after 100 steps. Observation
``[qpos[:7], qvel[:7], xpos[tips_arm], xpos[object], xpos[goal]]`` (23). Reset: the arm at
``qpos0``, the goal at the origin, the cylinder uniform in ``[-0.3, 0) x [-0.2, 0.2)`` farther than
0.17 from the goal (gymnasium's rejection loop, see ``reacher.first_accepted``); arm velocities
``U(-0.005, 0.005)``, object velocities 0. Frame skip 5 (``dt = 0.05``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from funrl import random
from funrl.envs.mujoco.base import MujocoEnv, MujocoParams, MujocoState, make_factory
from funrl.envs.mujoco.reacher import REJECTION_CANDIDATES, first_accepted
from funrl.envs.registry import register

__all__ = ["Pusher", "PusherParams"]


@dataclasses.dataclass(frozen=True)
class PusherParams(MujocoParams):
    """gymnasium's keyword options of Pusher-v5 (``xml_file`` aside)."""

    frame_skip: int = 5
    reward_near_weight: float = 0.5
    reward_dist_weight: float = 1.0
    reward_control_weight: float = 0.1
    max_steps_in_episode: int = 100


class Pusher(MujocoEnv[PusherParams]):
    """Pusher-v5: observation float32 ``[23]``, action Box ``[-2, 2]^7``."""

    env_id = "Pusher-v5"
    xml_file = "pusher_v5.xml"
    derived_fields = ("xpos",)

    def __init__(self) -> None:
        super().__init__()
        self.tips_arm = self.body_ids["tips_arm"]
        self.object = self.body_ids["object"]
        self.goal = self.body_ids["goal"]

    @property
    def default_params(self) -> PusherParams:
        return PusherParams()

    def observation_size(self, params: PusherParams) -> int:
        return 23

    def get_obs(self, state: MujocoState, params: PusherParams) -> torch.Tensor:
        xpos = self.field(state, "xpos")
        return torch.cat(
            [
                self.qpos(state)[..., :7],
                self.qvel(state)[..., :7],
                xpos[..., self.tips_arm, :],
                xpos[..., self.object, :],
                xpos[..., self.goal, :],
            ],
            dim=-1,
        )

    def reset_env(self, key: torch.Tensor, params: PusherParams) -> tuple[torch.Tensor, MujocoState]:
        key_x, key_y, key_qvel = random.split(key, 3)
        xs = random.uniform(key_x, (REJECTION_CANDIDATES, 1), torch.float64, -0.3, 0.0)
        ys = random.uniform(key_y, (REJECTION_CANDIDATES, 1), torch.float64, -0.2, 0.2)
        cylinders = torch.cat([xs, ys], dim=-1)
        cylinder = first_accepted(cylinders, torch.linalg.vector_norm(cylinders, dim=-1) > 0.17)
        qpos = self.init_qpos(key.device)
        qpos = torch.cat([qpos[:-4], cylinder, qpos.new_zeros(2)])
        qvel = self.init_qvel(key.device) + self.uniform(key_qvel, self.nv, -0.005, 0.005)
        qvel = torch.cat([qvel[:-4], qvel.new_zeros(4)])
        state = self.new_state(qpos, qvel)
        return self.to_agent(self.get_obs(state, params)), state

    def step_env(
        self, key: torch.Tensor, state: MujocoState, action: torch.Tensor, params: PusherParams
    ) -> tuple[torch.Tensor, MujocoState, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        self.check_action(state, action, params)
        next_state = self.simulate(state, action, params)
        xpos = self.field(next_state, "xpos")
        object_pos = xpos[..., self.object, :]
        reward_near = (
            -torch.linalg.vector_norm(object_pos - xpos[..., self.tips_arm, :], dim=-1)
            * params.reward_near_weight
        )
        reward_dist = (
            -torch.linalg.vector_norm(object_pos - xpos[..., self.goal, :], dim=-1)
            * params.reward_dist_weight
        )
        reward_ctrl = -self.action_square_sum(action) * params.reward_control_weight
        reward = reward_dist + reward_ctrl + reward_near
        info = {"reward_dist": reward_dist, "reward_ctrl": reward_ctrl, "reward_near": reward_near}
        obs = self.to_agent(self.get_obs(next_state, params))
        return (
            obs,
            next_state,
            reward.to(torch.float32),
            self.never(state),
            self.truncated(next_state, params),
            info,
        )


register(Pusher.env_id, make_factory(Pusher, PusherParams))
