"""MountainCar-v0, as gymnasium defines it (``gymnasium/envs/classic_control/mountain_car.py``).

Moore (1990), "Efficient memory-based learning for robot control". An underpowered car in a
valley: accelerate left (0), not at all (1) or right (2). ``v += (a - 1) * 0.001 - 0.0025 cos(3x)``,
clipped to ``[-0.07, 0.07]``; ``x += v`` clipped to ``[-1.2, 0.6]``; hitting the left wall stops
the car. Reward -1 per step; terminated when ``x >= 0.5`` and ``v >= goal_velocity`` (gymnasium's
option, default 0); truncated after 200 steps. Reset: ``x ~ U[-0.6, -0.4)``, ``v = 0``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import torch

from funrl.envs import core
from funrl.envs.core import Box, Discrete, Environment, EnvParams
from funrl.envs.registry import register

__all__ = [
    "MountainCar",
    "MountainCarParams",
    "MountainCarState",
    "at_least",
    "car_observation_space",
    "drive",
    "hit_left_wall",
    "reset_car",
]


class MountainCarState(NamedTuple):
    """Position and velocity (float32), steps taken (int32)."""

    position: torch.Tensor
    velocity: torch.Tensor
    time: torch.Tensor


@dataclasses.dataclass(frozen=True)
class MountainCarParams(EnvParams):
    """Physics and episode settings; numeric fields may be tensors (vmap them to randomise)."""

    min_position: float = -1.2
    max_position: float = 0.6
    max_speed: float = 0.07
    goal_position: float | torch.Tensor = 0.5
    goal_velocity: float | torch.Tensor = 0.0
    force: float | torch.Tensor = 0.001
    gravity: float | torch.Tensor = 0.0025
    reset_low: float = -0.6
    reset_high: float = -0.4
    max_steps_in_episode: int = 200


def at_least(value: torch.Tensor, threshold: float | torch.Tensor) -> torch.Tensor:
    """``value >= threshold``, in float64 for a Python-float threshold, as gymnasium compares
    (against the float32-rounded threshold a float32 value can cross too early or too late)."""
    if isinstance(threshold, float):
        return value.to(torch.float64) >= threshold
    return value >= threshold


def hit_left_wall(position: torch.Tensor, velocity: torch.Tensor, min_position: float) -> torch.Tensor:
    """The velocity after the car hits the left wall (``x == min_position`` moving left): 0."""
    return torch.where((position == min_position) & (velocity < 0), torch.zeros_like(velocity), velocity)


def drive(state: MountainCarState, push: torch.Tensor, params: Any) -> tuple[MountainCarState, torch.Tensor]:
    """Both cars' step: ``v += push - gravity cos(3x)`` clipped to the speed limit, ``x += v`` clipped
    to the track, stopped at the left wall; returns the next state and ``terminated`` (the goal)."""
    p = params
    velocity = state.velocity + push - p.gravity * torch.cos(3 * state.position)
    velocity = torch.clamp(velocity, -p.max_speed, p.max_speed)
    position = torch.clamp(state.position + velocity, p.min_position, p.max_position)
    velocity = hit_left_wall(position, velocity, p.min_position)
    terminated = at_least(position, p.goal_position) & at_least(velocity, p.goal_velocity)
    return MountainCarState(position, velocity, state.time + 1), terminated


def car_observation_space(params: Any) -> Box:
    """``[position, velocity]`` within the track and the speed limit, float32."""
    p = params
    return Box((p.min_position, -p.max_speed), (p.max_position, p.max_speed), (2,), torch.float32)


def reset_car(key: torch.Tensor, params: Any) -> tuple[torch.Tensor, MountainCarState]:
    """Both cars' reset: ``x ~ U[reset_low, reset_high)``, ``v = 0``."""
    position = core.reset_uniform(key, 1, params.reset_low, params.reset_high)[0]
    time = torch.zeros((), dtype=torch.int32, device=key.device)
    state = MountainCarState(position, torch.zeros_like(position), time)
    return MountainCar.get_obs(state), state


class MountainCar(Environment[MountainCarState, MountainCarParams]):
    """MountainCar-v0: observation ``[position, velocity]`` float32, action Discrete(3)."""

    batch_polymorphic = True

    @property
    def name(self) -> str:
        return "MountainCar-v0"

    @property
    def default_params(self) -> MountainCarParams:
        return MountainCarParams()

    def step_keys(self, key: torch.Tensor, params: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """``step_env`` draws nothing, so ``reset_env`` takes the whole key (no split)."""
        return key, key

    def step_env(
        self, key: torch.Tensor, state: MountainCarState, action: torch.Tensor, params: MountainCarParams
    ) -> tuple[torch.Tensor, MountainCarState, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        core.check_action_static(action, self.action_space(params), batch_shape=state.time.shape)
        new_state, terminated = drive(state, (action - 1).to(torch.float32) * params.force, params)
        reward = torch.full_like(new_state.position, -1.0)
        truncated = core.time_limit_reached(new_state.time, params)
        return self.get_obs(new_state), new_state, reward, terminated, truncated, {}

    def reset_env(
        self, key: torch.Tensor, params: MountainCarParams
    ) -> tuple[torch.Tensor, MountainCarState]:
        return reset_car(key, params)

    @staticmethod
    def get_obs(state: MountainCarState) -> torch.Tensor:
        return torch.stack([state.position, state.velocity], dim=-1)

    def observation_space(self, params: MountainCarParams | None = None) -> Box:
        return car_observation_space(self.default_params if params is None else params)

    def action_space(self, params: MountainCarParams | None = None) -> Discrete:
        return Discrete(3)


def make_mountain_car(**kwargs: Any) -> tuple[MountainCar, MountainCarParams]:
    """``make("MountainCar-v0", goal_velocity=..., max_episode_steps=..., <any params field>)``."""
    return MountainCar(), core.params_from_kwargs(MountainCarParams, "MountainCar-v0", kwargs)


register("MountainCar-v0", make_mountain_car)
