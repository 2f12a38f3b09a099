"""Reacher-v5, as gymnasium defines it (``gymnasium/envs/mujoco/reacher_v5.py``).

A two-joint arm (``reacher.xml``) reaches for a target. With ``vec = xpos[fingertip] -
xpos[target]`` after the step (as ``MjData`` holds it: one substep behind ``qpos``): reward
``-reward_dist_weight * |vec| - reward_control_weight * sum(a^2)``; never terminates, truncated
after 50 steps. Observation ``[cos(qpos[:2]), sin(qpos[:2]), qpos[2:], qvel[:2], vec[:2]]`` (10).
Reset: arm ``qpos0 + U(-0.1, 0.1)``, target uniform in the open disk of radius 0.2 (gymnasium
draws it by rejection from the square; see :func:`first_accepted`), arm velocities
``U(-0.005, 0.005)``, target velocities 0. Frame skip 2 (``dt = 0.02``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from funrl import random
from funrl.envs.mujoco.base import MujocoEnv, MujocoParams, MujocoState, make_factory
from funrl.envs.registry import register

__all__ = ["Reacher", "ReacherParams", "first_accepted"]

REJECTION_CANDIDATES = 32
"""Candidates drawn per rejection-sampled reset: all 32 are rejected with probability at most
0.38^32 < 1e-13 (Pusher's cylinder; Reacher's target 0.22^32), then the last one is used."""


def first_accepted(candidates: torch.Tensor, accepted: torch.Tensor) -> torch.Tensor:
    """The first candidate (``[K, ...]``) whose ``accepted[K]`` flag holds, else the last one.

    The first accepted of i.i.d. draws has the distribution of a rejection-sampling loop, without
    a data-dependent loop (so it batches and compiles).
    """
    num = accepted.shape[0]
    order = torch.arange(num, device=accepted.device)
    index = torch.where(accepted, order, num - 1).min()
    return candidates.index_select(0, index.reshape(1))[0]


@dataclasses.dataclass(frozen=True)
class ReacherParams(MujocoParams):
    """gymnasium's keyword options of Reacher-v5 (``xml_file`` aside)."""

    frame_skip: int = 2
    reward_dist_weight: float = 1.0
    reward_control_weight: float = 1.0
    max_steps_in_episode: int = 50


class Reacher(MujocoEnv[ReacherParams]):
    """Reacher-v5: observation float32 ``[10]``, action Box ``[-1, 1]^2``."""

    env_id = "Reacher-v5"
    xml_file = "reacher.xml"
    derived_fields = ("xpos",)

    def __init__(self) -> None:
        super().__init__()
        self.fingertip = self.body_ids["fingertip"]
        self.target = self.body_ids["target"]

    @property
    def default_params(self) -> ReacherParams:
        return ReacherParams()

    def observation_size(self, params: ReacherParams) -> int:
        return 10

    def fingertip_to_target(self, state: MujocoState) -> torch.Tensor:
        xpos = self.field(state, "xpos")
        return xpos[..., self.fingertip, :] - xpos[..., self.target, :]

    def get_obs(self, state: MujocoState, params: ReacherParams) -> torch.Tensor:
        qpos, qvel = self.qpos(state), self.qvel(state)
        theta = qpos[..., :2]
        to_target = self.fingertip_to_target(state)[..., :2]
        return torch.cat(
            [torch.cos(theta), torch.sin(theta), qpos[..., 2:], qvel[..., :2], to_target], dim=-1
        )

    def reset_env(self, key: torch.Tensor, params: ReacherParams) -> tuple[torch.Tensor, MujocoState]:
        key_qpos, key_goal, key_qvel = random.split(key, 3)
        qpos = self.uniform(key_qpos, self.nq, -0.1, 0.1) + self.init_qpos(key.device)
        goals = random.uniform(key_goal, (REJECTION_CANDIDATES, 2), torch.float64, -0.2, 0.2)
        goal = first_accepted(goals, torch.linalg.vector_norm(goals, dim=-1) < 0.2)
        qpos = torch.cat([qpos[:-2], goal])
        qvel = self.init_qvel(key.device) + self.uniform(key_qvel, self.nv, -0.005, 0.005)
        qvel = torch.cat([qvel[:-2], qvel.new_zeros(2)])
        state = self.new_state(qpos, qvel)
        return self.to_agent(self.get_obs(state, params)), state

    def step_env(
        self, key: torch.Tensor, state: MujocoState, action: torch.Tensor, params: ReacherParams
    ) -> tuple[torch.Tensor, MujocoState, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        self.check_action(state, action, params)
        next_state = self.simulate(state, action, params)
        reward_dist = (
            -torch.linalg.vector_norm(self.fingertip_to_target(next_state), dim=-1)
            * params.reward_dist_weight
        )
        reward_ctrl = -self.action_square_sum(action) * params.reward_control_weight
        reward = reward_dist + reward_ctrl
        info = {"reward_dist": reward_dist, "reward_ctrl": reward_ctrl}
        obs = self.to_agent(self.get_obs(next_state, params))
        return (
            obs,
            next_state,
            reward.to(torch.float32),
            self.never(state),
            self.truncated(next_state, params),
            info,
        )


register(Reacher.env_id, make_factory(Reacher, ReacherParams))
