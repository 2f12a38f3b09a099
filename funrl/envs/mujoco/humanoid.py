"""Humanoid-v5, as gymnasium defines it (``gymnasium/envs/mujoco/humanoid_v5.py``).

A 3D humanoid (``humanoid.xml``, PGS solver) walks forward. Reward ``forward_reward_weight *
x_velocity + healthy_reward * is_healthy - ctrl_cost_weight * sum(ctrl^2) -
clip(contact_cost_weight * sum(cfrc_ext^2), contact_cost_range)``; ``x_velocity`` is that of the
centre of mass (``sum(body_mass * xipos) / sum(body_mass)``, as ``MjData`` holds it after a step:
one substep behind ``qpos``). Healthy: ``healthy_z_range[0] < qpos[2] < healthy_z_range[1]``.
Terminates when unhealthy (if ``terminate_when_unhealthy``), truncated after 1000 steps.
Observation ``[qpos[2:], qvel, cinert[1:], cvel[1:], qfrc_actuator[6:], cfrc_ext[1:]]`` (348;
each of the last four optional). Reset: ``qpos0 + U(-s, s)`` and ``U(-s, s)`` velocities.
Frame skip 5 (``dt = 0.015``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from funrl.envs.mujoco.base import MujocoEnv, MujocoParams, MujocoState, make_factory
from funrl.envs.registry import register

__all__ = ["Humanoid", "HumanoidParams"]


@dataclasses.dataclass(frozen=True)
class HumanoidParams(MujocoParams):
    """gymnasium's keyword options of Humanoid-v5 (``xml_file`` aside)."""

    frame_skip: int = 5
    forward_reward_weight: float = 1.25
    ctrl_cost_weight: float = 0.1
    contact_cost_weight: float = 5e-7
    contact_cost_range: tuple[float, float] = (-math.inf, 10.0)
    healthy_reward: float = 5.0
    terminate_when_unhealthy: bool = True
    healthy_z_range: tuple[float, float] = (1.0, 2.0)
    reset_noise_scale: float = 1e-2
    exclude_current_positions_from_observation: bool = True
    include_cinert_in_observation: bool = True
    include_cvel_in_observation: bool = True
    include_qfrc_actuator_in_observation: bool = True
    include_cfrc_ext_in_observation: bool = True


class Humanoid(MujocoEnv[HumanoidParams]):
    """Humanoid-v5: observation float32 ``[348]``, action Box ``[-0.4, 0.4]^17``."""

    env_id = "Humanoid-v5"
    xml_file = "humanoid.xml"
    derived_fields = ("xipos", "cinert", "cvel", "qfrc_actuator", "cfrc_ext", "ten_length", "ten_velocity")

    @property
    def default_params(self) -> HumanoidParams:
        return HumanoidParams()

    def observation_size(self, params: HumanoidParams) -> int:
        p, bodies = params, self.nbody - 1
        size = self.nq + self.nv - 2 * int(p.exclude_current_positions_from_observation)
        size += bodies * 10 * int(p.include_cinert_in_observation)
        size += bodies * 6 * int(p.include_cvel_in_observation)
        size += (self.nv - 6) * int(p.include_qfrc_actuator_in_observation)
        return size + bodies * 6 * int(p.include_cfrc_ext_in_observation)

    def mass_center(self, state: MujocoState) -> torch.Tensor:
        """gymnasium's ``mass_center``: the mass-weighted mean of ``xipos``, x and y."""
        mass = self.body_mass.to(state.physics.device)
        weighted = (mass[:, None] * self.field(state, "xipos")[..., 0:2]).sum(-2)
        return weighted / mass.sum()

    def get_obs(self, state: MujocoState, params: HumanoidParams) -> torch.Tensor:
        skip = 2 * int(params.exclude_current_positions_from_observation)
        parts = [self.qpos(state)[..., skip:], self.qvel(state)]
        if params.include_cinert_in_observation:
            parts.append(self.flat_field(state, "cinert", first_row=1))
        if params.include_cvel_in_observation:
            parts.append(self.flat_field(state, "cvel", first_row=1))
        if params.include_qfrc_actuator_in_observation:
            parts.append(self.field(state, "qfrc_actuator")[..., 6:])
        if params.include_cfrc_ext_in_observation:
            parts.append(self.flat_field(state, "cfrc_ext", first_row=1))
        return torch.cat(parts, dim=-1)

    def is_healthy(self, state: MujocoState, params: HumanoidParams) -> torch.Tensor:
        min_z, max_z = params.healthy_z_range
        z = self.qpos(state)[..., 2]
        return (min_z < z) & (z < max_z)

    def reset_env(self, key: torch.Tensor, params: HumanoidParams) -> tuple[torch.Tensor, MujocoState]:
        return self.noisy_reset(key, params)

    def step_env(
        self, key: torch.Tensor, state: MujocoState, action: torch.Tensor, params: HumanoidParams
    ) -> tuple[torch.Tensor, MujocoState, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        self.check_action(state, action, params)
        next_state = self.simulate(state, action, params)
        xy_velocity = (self.mass_center(next_state) - self.mass_center(state)) / self.dt(params)
        healthy = self.is_healthy(next_state, params)
        forward_reward = params.forward_reward_weight * xy_velocity[..., 0]
        healthy_reward = healthy.to(torch.float64) * params.healthy_reward
        ctrl_cost = params.ctrl_cost_weight * self.action_square_sum(action)
        min_cost, max_cost = params.contact_cost_range
        contact_cost = params.contact_cost_weight * self.flat_field(next_state, "cfrc_ext").square().sum(-1)
        contact_cost = contact_cost.clamp(min_cost, max_cost)
        reward = forward_reward + healthy_reward - (ctrl_cost + contact_cost)
        terminated = ~healthy & params.terminate_when_unhealthy
        qpos = self.qpos(next_state)
        info = {
            "x_position": qpos[..., 0],
            "y_position": qpos[..., 1],
            "tendon_length": self.field(next_state, "ten_length"),
            "tendon_velocity": self.field(next_state, "ten_velocity"),
            "distance_from_origin": torch.linalg.vector_norm(qpos[..., 0:2], dim=-1),
            "x_velocity": xy_velocity[..., 0],
            "y_velocity": xy_velocity[..., 1],
            "reward_survive": healthy_reward,
            "reward_forward": forward_reward,
            "reward_ctrl": -ctrl_cost,
            "reward_contact": -contact_cost,
        }
        obs = self.to_agent(self.get_obs(next_state, params))
        return obs, next_state, reward.to(torch.float32), terminated, self.truncated(next_state, params), info


register(Humanoid.env_id, make_factory(Humanoid, HumanoidParams))
