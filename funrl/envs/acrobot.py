"""Acrobot-v1, as gymnasium defines it (``gymnasium/envs/classic_control/acrobot.py``).

Sutton (1996), "Generalization in reinforcement learning: successful examples using sparse coarse
coding", with the dynamics of Sutton & Barto's book (``book_or_nips="book"``, gymnasium's default;
``"nips"`` drops one term). Two links, torque ``{-1, 0, +1}`` (actions 0, 1, 2) on the joint
between them; one fourth-order Runge-Kutta step of ``dt = 0.2`` (gymnasium's ``rk4`` over
``[0, dt]``), angles wrapped to ``[-pi, pi]``, velocities clipped to ``[-4 pi, 4 pi]`` and
``[-9 pi, 9 pi]``. Reward -1 per step, 0 on the terminating step; terminated when
``-cos(theta1) - cos(theta1 + theta2) > 1``; truncated after 500 steps. Reset: all four state
variables ``~ U[-0.1, 0.1)``. Optional torque noise (``torque_noise_max > 0``) uses the step key.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import torch

from funrl import random
from funrl.envs import core
from funrl.envs.core import Box, Discrete, Environment, EnvParams
from funrl.envs.registry import register

__all__ = ["Acrobot", "AcrobotParams", "AcrobotState", "rk4", "wrap"]


class AcrobotState(NamedTuple):
    """Joint angles and angular velocities (float32), steps taken (int32)."""

    theta1: torch.Tensor
    theta2: torch.Tensor
    dtheta1: torch.Tensor
    dtheta2: torch.Tensor
    time: torch.Tensor


@dataclasses.dataclass(frozen=True)
class AcrobotParams(EnvParams):
    """Physics and episode settings (gymnasium's class constants); numeric fields may be tensors."""

    dt: float | torch.Tensor = 0.2
    link_length_1: float | torch.Tensor = 1.0
    link_mass_1: float | torch.Tensor = 1.0
    link_mass_2: float | torch.Tensor = 1.0
    link_com_pos_1: float | torch.Tensor = 0.5
    link_com_pos_2: float | torch.Tensor = 0.5
    link_moi: float | torch.Tensor = 1.0
    gravity: float | torch.Tensor = 9.8
    max_vel_1: float = 4 * math.pi
    max_vel_2: float = 9 * math.pi
    avail_torque: tuple[float, float, float] = (-1.0, 0.0, 1.0)
    torque_noise_max: float | torch.Tensor = 0.0
    book_or_nips: str = "book"
    reset_low: float = -0.1
    reset_high: float = 0.1
    max_steps_in_episode: int = 500

    def __post_init__(self) -> None:
        if self.book_or_nips not in ("book", "nips"):
            raise ValueError(f"book_or_nips: expected 'book' or 'nips', got {self.book_or_nips!r}")
        if len(self.avail_torque) != 3:
            raise ValueError(f"avail_torque: expected 3 torques, got {self.avail_torque!r}")


def wrap(x: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """Wrap ``x`` into ``[low, high]`` as gymnasium's ``wrap`` does (values already inside,
    including both ends, are kept), subtracting or adding the period as many times as needed."""
    period = high - low
    x = torch.where(x > high, x - torch.ceil((x - high) / period) * period, x)
    return torch.where(x < low, x + torch.ceil((low - x) / period) * period, x)


def rk4(derivs: Any, y: tuple[torch.Tensor, ...], dt: float | torch.Tensor) -> tuple[torch.Tensor, ...]:
    """One classical Runge-Kutta step of ``dy/dt = derivs(y)`` over ``dt`` (gymnasium's ``rk4``
    with ``t = [0, dt]``)."""
    half = dt / 2.0

    def axpy(a: float | torch.Tensor, k: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        return tuple(yi + a * ki for yi, ki in zip(y, k, strict=True))

    k1 = derivs(y)
    k2 = derivs(axpy(half, k1))
    k3 = derivs(axpy(half, k2))
    k4 = derivs(axpy(dt, k3))
    return tuple(
        yi + dt / 6.0 * (a + 2 * b + 2 * c + d) for yi, a, b, c, d in zip(y, k1, k2, k3, k4, strict=True)
    )


class Acrobot(Environment[AcrobotState, AcrobotParams]):
    """Acrobot-v1: observation ``[cos t1, sin t1, cos t2, sin t2, dt1, dt2]`` float32, Discrete(3)."""

    @property
    def name(self) -> str:
        return "Acrobot-v1"

    @property
    def default_params(self) -> AcrobotParams:
        return AcrobotParams()

    @staticmethod
    def dsdt(
        state: tuple[torch.Tensor, ...], torque: torch.Tensor, p: AcrobotParams
    ) -> tuple[torch.Tensor, ...]:
        """Time derivative of ``(theta1, theta2, dtheta1, dtheta2)`` under ``torque``."""
        theta1, theta2, dtheta1, dtheta2 = state
        m1, m2, l1 = p.link_mass_1, p.link_mass_2, p.link_length_1
        lc1, lc2, i1, i2, g = p.link_com_pos_1, p.link_com_pos_2, p.link_moi, p.link_moi, p.gravity
        cos2, sin2 = torch.cos(theta2), torch.sin(theta2)
        d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * cos2) + i1 + i2
        d2 = m2 * (lc2**2 + l1 * lc2 * cos2) + i2
        phi2 = m2 * lc2 * g * torch.cos(theta1 + theta2 - math.pi / 2.0)
        phi1 = (
            -m2 * l1 * lc2 * dtheta2**2 * sin2
            - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * sin2
            + (m1 * lc1 + m2 * l1) * g * torch.cos(theta1 - math.pi / 2)
            + phi2
        )
        if p.book_or_nips == "nips":
            ddtheta2 = (torque + d2 / d1 * phi1 - phi2) / (m2 * lc2**2 + i2 - d2**2 / d1)
        else:
            ddtheta2 = (torque + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * sin2 - phi2) / (
                m2 * lc2**2 + i2 - d2**2 / d1
            )
        ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
        return dtheta1, dtheta2, ddtheta1, ddtheta2

    def step_keys(self, key: torch.Tensor, params: AcrobotParams) -> tuple[torch.Tensor, torch.Tensor]:
        """Without torque noise ``step_env`` draws nothing, so ``reset_env`` takes the whole key."""
        if isinstance(params.torque_noise_max, float) and params.torque_noise_max == 0.0:
            return key, key
        key_step, key_reset = random.split(key)
        return key_step, key_reset

    def step_env(
        self, key: torch.Tensor, state: AcrobotState, action: torch.Tensor, params: AcrobotParams
    ) -> tuple[torch.Tensor, AcrobotState, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        core.check_action_static(action, self.action_space(params))
        p = params
        low, mid, high = p.avail_torque
        torque = torch.where(action == 0, low, torch.where(action == 1, mid, high)).to(torch.float32)
        if not (isinstance(p.torque_noise_max, float) and p.torque_noise_max == 0.0):
            torque = torque + random.uniform(key, (), torch.float32, -p.torque_noise_max, p.torque_noise_max)
        y = rk4(lambda s: self.dsdt(s, torque, p), tuple(state[:4]), p.dt)
        theta1 = wrap(y[0], -math.pi, math.pi)
        theta2 = wrap(y[1], -math.pi, math.pi)
        dtheta1 = torch.clamp(y[2], -p.max_vel_1, p.max_vel_1)
        dtheta2 = torch.clamp(y[3], -p.max_vel_2, p.max_vel_2)
        time = state.time + 1
        new_state = AcrobotState(theta1, theta2, dtheta1, dtheta2, time)
        # gymnasium compares in float64; so do we (the float32 sum may round across 1.0).
        height = -torch.cos(theta1.double()) - torch.cos((theta2 + theta1).double())
        terminated = height > 1.0
        reward = torch.where(terminated, 0.0, -1.0).to(torch.float32)
        return self.get_obs(new_state), new_state, reward, terminated, core.time_limit_reached(time, p), {}

    def reset_env(self, key: torch.Tensor, params: AcrobotParams) -> tuple[torch.Tensor, AcrobotState]:
        u = core.reset_uniform(key, 4, params.reset_low, params.reset_high)
        state = AcrobotState(u[0], u[1], u[2], u[3], torch.zeros((), dtype=torch.int32, device=key.device))
        return self.get_obs(state), state

    @staticmethod
    def get_obs(state: AcrobotState) -> torch.Tensor:
        t1, t2 = state.theta1, state.theta2
        return torch.stack(
            [torch.cos(t1), torch.sin(t1), torch.cos(t2), torch.sin(t2), state.dtheta1, state.dtheta2], dim=-1
        )

    def observation_space(self, params: AcrobotParams | None = None) -> Box:
        p = self.default_params if params is None else params
        high = (1.0, 1.0, 1.0, 1.0, p.max_vel_1, p.max_vel_2)
        return Box(tuple(-h for h in high), high, (6,), torch.float32)

    def action_space(self, params: AcrobotParams | None = None) -> Discrete:
        return Discrete(3)


def make_acrobot(**kwargs: Any) -> tuple[Acrobot, AcrobotParams]:
    """``make("Acrobot-v1", book_or_nips=..., torque_noise_max=..., <any params field>)``."""
    return Acrobot(), core.params_from_kwargs(AcrobotParams, "Acrobot-v1", kwargs)


register("Acrobot-v1", make_acrobot)
