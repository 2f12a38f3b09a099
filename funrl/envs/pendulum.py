"""Pendulum-v1, as gymnasium defines it (``gymnasium/envs/classic_control/pendulum.py``).

Swing a frictionless pendulum up and hold it: torque ``u`` in ``[-2, 2]`` (clipped), reward
``-(angle_normalize(theta)^2 + 0.1 theta_dot^2 + 0.001 u^2)`` computed from the state BEFORE the
update, semi-implicit Euler with ``dt = 0.05``, angular velocity clipped to ``[-8, 8]``, the angle
itself left unwrapped in the state (as gymnasium does). Never terminates; truncated after 200
steps. Reset: ``theta ~ U[-pi, pi)``, ``theta_dot ~ U[-1, 1)``. Gymnasium's option ``g`` (gravity)
is a params field.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import torch

from funrl.envs import core
from funrl.envs.core import Box, Environment, EnvParams
from funrl.envs.registry import register

__all__ = ["Pendulum", "PendulumParams", "PendulumState"]


class PendulumState(NamedTuple):
    """Angle (0 = upright, unwrapped) and angular velocity, float32; steps taken, int32."""

    theta: torch.Tensor
    theta_dot: torch.Tensor
    time: torch.Tensor


@dataclasses.dataclass(frozen=True)
class PendulumParams(EnvParams):
    """Physics and episode settings; numeric fields may be tensors (vmap them to randomise)."""

    max_speed: float | torch.Tensor = 8.0
    max_torque: float = 2.0
    dt: float | torch.Tensor = 0.05
    g: float | torch.Tensor = 10.0
    m: float | torch.Tensor = 1.0
    l: float | torch.Tensor = 1.0  # noqa: E741 - gymnasium's name
    x_init: float = math.pi  # reset: theta ~ U[-x_init, x_init)
    y_init: float = 1.0  # reset: theta_dot ~ U[-y_init, y_init)
    max_steps_in_episode: int = 200


class Pendulum(Environment[PendulumState, PendulumParams]):
    """Pendulum-v1: observation ``[cos theta, sin theta, theta_dot]`` float32, action Box[1]."""

    batch_polymorphic = True

    @property
    def name(self) -> str:
        return "Pendulum-v1"

    @property
    def default_params(self) -> PendulumParams:
        return PendulumParams()

    def step_keys(self, key: torch.Tensor, params: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """``step_env`` draws nothing, so ``reset_env`` takes the whole key (no split)."""
        return key, key

    def step_env(
        self, key: torch.Tensor, state: PendulumState, action: torch.Tensor, params: PendulumParams
    ) -> tuple[torch.Tensor, PendulumState, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        core.check_action_static(action, self.action_space(params), batch_shape=state.time.shape)
        p = params
        u = torch.clamp(action[..., 0].to(torch.float32), -p.max_torque, p.max_torque)
        theta, theta_dot = state.theta, state.theta_dot
        costs = core.angle_normalize(theta).square() + 0.1 * theta_dot.square() + 0.001 * u.square()
        new_theta_dot = theta_dot + (3 * p.g / (2 * p.l) * torch.sin(theta) + 3.0 / (p.m * p.l**2) * u) * p.dt
        new_theta_dot = torch.clamp(new_theta_dot, -p.max_speed, p.max_speed)
        new_theta = theta + new_theta_dot * p.dt
        time = state.time + 1
        new_state = PendulumState(new_theta, new_theta_dot, time)
        terminated = torch.zeros_like(time, dtype=torch.bool)
        truncated = core.time_limit_reached(time, p)
        return self.get_obs(new_state), new_state, -costs, terminated, truncated, {}

    def reset_env(self, key: torch.Tensor, params: PendulumParams) -> tuple[torch.Tensor, PendulumState]:
        high = torch.tensor([params.x_init, params.y_init], dtype=torch.float32, device=key.device)
        u = core.reset_uniform(key, 2, -high, high)
        state = PendulumState(u[0], u[1], torch.zeros((), dtype=torch.int32, device=key.device))
        return self.get_obs(state), state

    @staticmethod
    def get_obs(state: PendulumState) -> torch.Tensor:
        return torch.stack([torch.cos(state.theta), torch.sin(state.theta), state.theta_dot], dim=-1)

    def observation_space(self, params: PendulumParams | None = None) -> Box:
        p = self.default_params if params is None else params
        speed = float(p.max_speed) if isinstance(p.max_speed, float) else math.inf
        return Box((-1.0, -1.0, -speed), (1.0, 1.0, speed), (3,), torch.float32)

    def action_space(self, params: PendulumParams | None = None) -> Box:
        p = self.default_params if params is None else params
        return Box(-p.max_torque, p.max_torque, (1,), torch.float32)


def make_pendulum(**kwargs: Any) -> tuple[Pendulum, PendulumParams]:
    """``make("Pendulum-v1", g=..., max_episode_steps=..., <any params field>)``."""
    return Pendulum(), core.params_from_kwargs(PendulumParams, "Pendulum-v1", kwargs)


register("Pendulum-v1", make_pendulum)
