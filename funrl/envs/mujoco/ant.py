"""Ant-v5, as gymnasium defines it (``gymnasium/envs/mujoco/ant_v5.py``).

A four-legged robot (``ant.xml``) walks forward. Reward ``forward_reward_weight * x_velocity +
healthy_reward * is_healthy - ctrl_cost_weight * sum(a^2) - contact_cost_weight *
sum(clip(cfrc_ext, contact_force_range)^2)``; ``x_velocity`` is that of the main body's
position (``xpos``, as ``MjData`` holds it after a step: one substep behind ``qpos``). Healthy:
``[qpos, qvel]`` finite and ``healthy_z_range[0] <= qpos[2] <= healthy_z_range[1]``. Terminates
when unhealthy (if ``terminate_when_unhealthy``), truncated after 1000 steps. Observation
``[qpos[2:], qvel, clip(cfrc_ext[1:], contact_force_range)]`` (105; 27 without the contact
forces). Reset: ``qpos0 + U(-s, s)``, ``s * N(0, 1)`` velocities. Frame skip 5 (``dt = 0.05``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from funrl.envs.mujoco.base import MujocoEnv, MujocoParams, MujocoState, make_factory
from funrl.envs.registry import register

__all__ = ["Ant", "AntParams"]


@dataclasses.dataclass(frozen=True)
class AntParams(MujocoParams):
    """gymnasium's keyword options of Ant-v5 (``xml_file`` aside); ``main_body`` is a body id or name."""

    frame_skip: int = 5
    forward_reward_weight: float = 1.0
    ctrl_cost_weight: float = 0.5
    contact_cost_weight: float = 5e-4
    healthy_reward: float = 1.0
    main_body: int | str = 1
    terminate_when_unhealthy: bool = True
    healthy_z_range: tuple[float, float] = (0.2, 1.0)
    contact_force_range: tuple[float, float] = (-1.0, 1.0)
    reset_noise_scale: float = 0.1
    exclude_current_positions_from_observation: bool = True
    include_cfrc_ext_in_observation: bool = True


class Ant(MujocoEnv[AntParams]):
    """Ant-v5: observation float32 ``[105]``, action Box ``[-1, 1]^8``."""

    env_id = "Ant-v5"
    xml_file = "ant.xml"
    derived_fields = ("xpos", "cfrc_ext")

    @property
    def default_params(self) -> AntParams:
        return AntParams()

    def observation_size(self, params: AntParams) -> int:
        size = self.nq + self.nv - 2 * int(params.exclude_current_positions_from_observation)
        return size + (self.nbody - 1) * 6 * int(params.include_cfrc_ext_in_observation)

    def main_body_position(self, state: MujocoState, params: AntParams) -> torch.Tensor:
        body = params.main_body
        if isinstance(body, str):
            if body not in self.body_ids:
                raise ValueError(
                    f"main_body: no body named {body!r} in {self.xml_file}; bodies: {list(self.body_ids)}"
                )
            body = self.body_ids[body]
        elif not 0 <= body < self.nbody:
            raise ValueError(f"main_body: expected a body id in [0, {self.nbody}) or a body name, got {body}")
        return self.field(state, "xpos")[..., body, :2]

    def contact_forces(self, state: MujocoState, params: AntParams) -> torch.Tensor:
        """``cfrc_ext`` clipped to ``contact_force_range``, flattened: ``[..., nbody * 6]``."""
        low, high = params.contact_force_range
        return self.flat_field(state, "cfrc_ext").clamp(low, high)

    def get_obs(self, state: MujocoState, params: AntParams) -> torch.Tensor:
        skip = 2 * int(params.exclude_current_positions_from_observation)
        parts = [self.qpos(state)[..., skip:], self.qvel(state)]
        if params.include_cfrc_ext_in_observation:
            parts.append(self.contact_forces(state, params)[..., 6:])  # the world body's row dropped
        return torch.cat(parts, dim=-1)

    def is_healthy(self, state: MujocoState, params: AntParams) -> torch.Tensor:
        min_z, max_z = params.healthy_z_range
        z = self.qpos(state)[..., 2]
        finite = torch.isfinite(torch.cat([self.qpos(state), self.qvel(state)], dim=-1)).all(-1)
        return finite & (min_z <= z) & (z <= max_z)

    def reset_env(self, key: torch.Tensor, params: AntParams) -> tuple[torch.Tensor, MujocoState]:
        return self.noisy_reset(key, params, qvel_noise="normal")

    def step_env(
        self, key: torch.Tensor, state: MujocoState, action: torch.Tensor, params: AntParams
    ) -> tuple[torch.Tensor, MujocoState, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        self.check_action(state, action, params)
        next_state = self.simulate(state, action, params)
        xy_before = self.main_body_position(state, params)
        xy_after = self.main_body_position(next_state, params)
        xy_velocity = (xy_after - xy_before) / self.dt(params)
        healthy = self.is_healthy(next_state, params)
        forward_reward = xy_velocity[..., 0] * params.forward_reward_weight
        healthy_reward = healthy.to(torch.float64) * params.healthy_reward
        ctrl_cost = params.ctrl_cost_weight * self.action_square_sum(action)
        contact_cost = params.contact_cost_weight * self.contact_forces(next_state, params).square().sum(-1)
        reward = forward_reward + healthy_reward - (ctrl_cost + contact_cost)
        terminated = ~healthy & params.terminate_when_unhealthy
        qpos = self.qpos(next_state)
        info = {
            "x_position": qpos[..., 0],
            "y_position": qpos[..., 1],
            "distance_from_origin": torch.linalg.vector_norm(qpos[..., 0:2], dim=-1),
            "x_velocity": xy_velocity[..., 0],
            "y_velocity": xy_velocity[..., 1],
            "reward_forward": forward_reward,
            "reward_ctrl": -ctrl_cost,
            "reward_contact": -contact_cost,
            "reward_survive": healthy_reward,
        }
        obs = self.to_agent(self.get_obs(next_state, params))
        return obs, next_state, reward.to(torch.float32), terminated, self.truncated(next_state, params), info


register(Ant.env_id, make_factory(Ant, AntParams))
