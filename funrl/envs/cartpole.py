"""CartPole-v1, as gymnasium defines it (``gymnasium/envs/classic_control/cartpole.py``).

Barto, Sutton & Anderson, "Neuronlike adaptive elements that can solve difficult learning control
problems" (1983). A pole hinged on a cart; push the cart left (action 0) or right (action 1) with
a fixed force. Dynamics, explicit Euler integration (``tau = 0.02``), reward (+1 per step, or
gymnasium's ``sutton_barto_reward``: 0 per step and -1 on the terminating step), termination
(``|x| > 2.4`` or ``|theta| > 12 deg``), truncation after 500 steps and the reset distribution
(every state variable uniform in ``[-0.05, 0.05)``) follow gymnasium. The state is kept in
float32 (gymnasium integrates in float64 and returns float32 observations).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import torch

from funrl.envs import core
from funrl.envs.core import Box, Discrete, Environment, EnvParams
from funrl.envs.registry import register

__all__ = ["CartPole", "CartPoleParams", "CartPoleState"]


class CartPoleState(NamedTuple):
    """Cart position and velocity, pole angle and angular velocity (float32), steps taken (int32)."""

    x: torch.Tensor
    x_dot: torch.Tensor
    theta: torch.Tensor
    theta_dot: torch.Tensor
    time: torch.Tensor


@dataclasses.dataclass(frozen=True)
class CartPoleParams(EnvParams):
    """Physics and episode settings; numeric fields may be tensors (vmap them to randomise).

    ``kinematics_integrator`` is ``"euler"`` (gymnasium's default) or ``"semi-implicit euler"``.
    """

    gravity: float | torch.Tensor = 9.8
    masscart: float | torch.Tensor = 1.0
    masspole: float | torch.Tensor = 0.1
    length: float | torch.Tensor = 0.5  # half the pole's length
    force_mag: float | torch.Tensor = 10.0
    tau: float | torch.Tensor = 0.02  # seconds between state updates
    theta_threshold_radians: float | torch.Tensor = 12 * 2 * math.pi / 360
    x_threshold: float | torch.Tensor = 2.4
    sutton_barto_reward: bool | torch.Tensor = False
    kinematics_integrator: str = "euler"
    reset_low: float = -0.05
    reset_high: float = 0.05
    max_steps_in_episode: int = 500

    def __post_init__(self) -> None:
        if self.kinematics_integrator not in ("euler", "semi-implicit euler"):
            raise ValueError(
                "kinematics_integrator: expected 'euler' or 'semi-implicit euler', "
                f"got {self.kinematics_integrator!r}"
            )
        if isinstance(self.reset_low, float) and isinstance(self.reset_high, float):
            if self.reset_low > self.reset_high:
                raise ValueError(
                    f"reset_low: expected <= reset_high ({self.reset_high}), got {self.reset_low}"
                )


def exceeds(value: torch.Tensor, threshold: float | torch.Tensor) -> torch.Tensor:
    """``|value| > threshold``, compared in float64 as gymnasium compares.

    Against a Python float, a float32 tensor would be compared with the threshold rounded to
    float32, which can round up and miss a crossing; in float64 the answer is exact.
    """
    if isinstance(threshold, float):
        return value.abs().to(torch.float64) > threshold
    return value.abs() > threshold


class CartPole(Environment[CartPoleState, CartPoleParams]):
    """CartPole-v1: observation ``[x, x_dot, theta, theta_dot]`` float32, action Discrete(2)."""

    batch_polymorphic = True

    @property
    def name(self) -> str:
        return "CartPole-v1"

    @property
    def default_params(self) -> CartPoleParams:
        return CartPoleParams()

    def step_keys(self, key: torch.Tensor, params: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """``step_env`` draws nothing, so ``reset_env`` takes the whole key (no split)."""
        return key, key

    def step_env(
        self, key: torch.Tensor, state: CartPoleState, action: torch.Tensor, params: CartPoleParams
    ) -> tuple[torch.Tensor, CartPoleState, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        core.check_action_static(action, self.action_space(params), batch_shape=state.time.shape)
        p = params
        force = torch.where(action == 1, p.force_mag, -p.force_mag)
        cos_theta = torch.cos(state.theta)
        sin_theta = torch.sin(state.theta)
        total_mass = p.masspole + p.masscart
        polemass_length = p.masspole * p.length
        temp = (force + polemass_length * state.theta_dot.square() * sin_theta) / total_mass
        theta_acc = (p.gravity * sin_theta - cos_theta * temp) / (
            p.length * (4.0 / 3.0 - p.masspole * cos_theta.square() / total_mass)
        )
        x_acc = temp - polemass_length * theta_acc * cos_theta / total_mass
        if p.kinematics_integrator == "euler":
            x = state.x + p.tau * state.x_dot
            x_dot = state.x_dot + p.tau * x_acc
            theta = state.theta + p.tau * state.theta_dot
            theta_dot = state.theta_dot + p.tau * theta_acc
        else:
            x_dot = state.x_dot + p.tau * x_acc
            x = state.x + p.tau * x_dot
            theta_dot = state.theta_dot + p.tau * theta_acc
            theta = state.theta + p.tau * theta_dot
        time = state.time + 1
        terminated = exceeds(x, p.x_threshold) | exceeds(theta, p.theta_threshold_radians)
        truncated = core.time_limit_reached(time, p)
        reward = self.reward(terminated, p)
        new_state = CartPoleState(x, x_dot, theta, theta_dot, time)
        return self.get_obs(new_state), new_state, reward, terminated, truncated, {}

    @staticmethod
    def reward(terminated: torch.Tensor, params: CartPoleParams) -> torch.Tensor:
        """+1 every step; with ``sutton_barto_reward``, 0 every step and -1 on termination."""
        sutton_barto = -terminated.to(torch.float32)
        if isinstance(params.sutton_barto_reward, bool):
            return sutton_barto if params.sutton_barto_reward else torch.ones_like(sutton_barto)
        return torch.where(params.sutton_barto_reward, sutton_barto, 1.0)

    def reset_env(self, key: torch.Tensor, params: CartPoleParams) -> tuple[torch.Tensor, CartPoleState]:
        u = core.reset_uniform(key, 4, params.reset_low, params.reset_high)
        state = CartPoleState(u[0], u[1], u[2], u[3], torch.zeros((), dtype=torch.int32, device=key.device))
        return self.get_obs(state), state

    @staticmethod
    def get_obs(state: CartPoleState) -> torch.Tensor:
        return torch.stack([state.x, state.x_dot, state.theta, state.theta_dot], dim=-1)

    def observation_space(self, params: CartPoleParams | None = None) -> Box:
        """gymnasium's bounds: twice the termination thresholds (unbounded where a threshold is a
        tensor, since then the bound differs across a batch of params)."""
        p = self.default_params if params is None else params

        def twice(threshold: float | torch.Tensor) -> float:
            return 2 * threshold if isinstance(threshold, float) else math.inf

        high = (twice(p.x_threshold), math.inf, twice(p.theta_threshold_radians), math.inf)
        return Box(tuple(-h for h in high), high, (4,), torch.float32)

    def action_space(self, params: CartPoleParams | None = None) -> Discrete:
        return Discrete(2)


def make_cartpole(**kwargs: Any) -> tuple[CartPole, CartPoleParams]:
    """``make("CartPole-v1", sutton_barto_reward=..., max_episode_steps=..., <any params field>)``."""
    return CartPole(), core.params_from_kwargs(CartPoleParams, "CartPole-v1", kwargs)


register("CartPole-v1", make_cartpole)
