"""MountainCarContinuous-v0, as gymnasium defines it
(``gymnasium/envs/classic_control/continuous_mountain_car.py``).

The car of MountainCar-v0 with a continuous force ``a`` in ``[-1, 1]`` (clipped):
``v += clip(a) * 0.0015 - 0.0025 cos(3x)``, the same clipping and left wall, goal ``x >= 0.45``
with ``v >= goal_velocity``. Reward ``100`` on reaching the goal minus ``0.1 a^2`` for the
UNclipped action, as gymnasium computes it. Truncated after 999 steps. Reset as MountainCar.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from funrl.envs import core
from funrl.envs.core import Box, Environment, EnvParams
from funrl.envs.mountain_car import MountainCar, MountainCarState, car_observation_space, drive, reset_car
from funrl.envs.registry import register

__all__ = ["ContinuousMountainCar", "ContinuousMountainCarParams"]


@dataclasses.dataclass(frozen=True)
class ContinuousMountainCarParams(EnvParams):
    """Physics and episode settings; numeric fields may be tensors (vmap them to randomise)."""

    min_action: float = -1.0
    max_action: float = 1.0
    min_position: float = -1.2
    max_position: float = 0.6
    max_speed: float = 0.07
    goal_position: float | torch.Tensor = 0.45
    goal_velocity: float | torch.Tensor = 0.0
    power: float | torch.Tensor = 0.0015
    gravity: float | torch.Tensor = 0.0025
    reset_low: float = -0.6
    reset_high: float = -0.4
    max_steps_in_episode: int = 999


class ContinuousMountainCar(Environment[MountainCarState, ContinuousMountainCarParams]):
    """MountainCarContinuous-v0: observation ``[position, velocity]`` float32, action Box[1]."""

    batch_polymorphic = True

    @property
    def name(self) -> str:
        return "MountainCarContinuous-v0"

    @property
    def default_params(self) -> ContinuousMountainCarParams:
        return ContinuousMountainCarParams()

    def step_keys(self, key: torch.Tensor, params: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """``step_env`` draws nothing, so ``reset_env`` takes the whole key (no split)."""
        return key, key

    def step_env(
        self,
        key: torch.Tensor,
        state: MountainCarState,
        action: torch.Tensor,
        params: ContinuousMountainCarParams,
    ) -> tuple[torch.Tensor, MountainCarState, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        core.check_action_static(action, self.action_space(params), batch_shape=state.time.shape)
        p = params
        a = action[..., 0].to(torch.float32)
        force = torch.clamp(a, p.min_action, p.max_action)
        new_state, terminated = drive(state, force * p.power, p)
        reward = torch.where(terminated, 100.0, 0.0) - a.square() * 0.1
        obs = MountainCar.get_obs(new_state)
        return obs, new_state, reward, terminated, core.time_limit_reached(new_state.time, p), {}

    def reset_env(
        self, key: torch.Tensor, params: ContinuousMountainCarParams
    ) -> tuple[torch.Tensor, MountainCarState]:
        return reset_car(key, params)

    def observation_space(self, params: ContinuousMountainCarParams | None = None) -> Box:
        return car_observation_space(self.default_params if params is None else params)

    def action_space(self, params: ContinuousMountainCarParams | None = None) -> Box:
        p = self.default_params if params is None else params
        return Box(p.min_action, p.max_action, (1,), torch.float32)


def make_continuous_mountain_car(**kwargs: Any) -> tuple[ContinuousMountainCar, ContinuousMountainCarParams]:
    """``make("MountainCarContinuous-v0", goal_velocity=..., <any params field>)``."""
    params = core.params_from_kwargs(ContinuousMountainCarParams, "MountainCarContinuous-v0", kwargs)
    return ContinuousMountainCar(), params


register("MountainCarContinuous-v0", make_continuous_mountain_car)
