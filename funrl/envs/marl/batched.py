"""``funrl.envs.marl.vmap(env, num_envs)``: N multi-agent environments, one key, one call.

The multi-agent twin of ``funrl.envs.vmap``: ``reset``/``step`` split the key into ``num_envs``
keys and ``torch.func.vmap`` the single-environment function over them, so
``batched.step(key, ...)`` at env ``i`` equals ``env.step(split(key, num_envs)[i], ...)``. Every
team tensor gains a leading ``[num_envs]`` axis before its agent axis (``[N, A_team, ...]``), and
so must the actions. In eager mode the actions are checked (shape, dtype, NaN, range) before
the vmap, with the batch in the message. An env that declares ``batch_polymorphic`` has its
draws vmapped and its ``step_with`` called on the whole batch: the same numbers without vmap's
per-op cost.
"""

from __future__ import annotations

from typing import Any

import torch

from funrl import control, random
from funrl import tree as ftree
from funrl.envs.core import Box, Space
from funrl.envs.marl.core import MultiAgentEnv, Teams, check_actions

__all__ = ["BatchedMultiAgentEnv", "vmap"]


class BatchedMultiAgentEnv:
    """``num_envs`` copies of a :class:`MultiAgentEnv` stepped together; see :func:`vmap`."""

    def __init__(self, env: MultiAgentEnv, num_envs: int):
        if not isinstance(env, MultiAgentEnv):
            raise TypeError(f"env: expected a funrl.envs.marl.MultiAgentEnv, got {type(env).__name__}")
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs: expected a positive int, got {num_envs!r}")
        self.env = env
        self.num_envs = num_envs
        self._reset = torch.func.vmap(env.reset, in_dims=(0, None), randomness="error")
        self._draw_step = torch.func.vmap(env.draw_step, in_dims=(0, None), randomness="error")
        self._step_with = (
            env.step_with
            if env.batch_polymorphic
            else torch.func.vmap(env.step_with, in_dims=(0, 0, 0, None), randomness="error")
        )
        self._step_env = torch.func.vmap(env.step_env, in_dims=(0, 0, 0, None), randomness="error")
        self._global_state = torch.func.vmap(env.global_state, in_dims=(0, None))

    @property
    def name(self) -> str:
        return f"{self.env.name}x{self.num_envs}"

    @property
    def agents(self) -> tuple[str, ...]:
        return self.env.agents

    @property
    def teams(self) -> dict[str, tuple[str, ...]]:
        return self.env.teams

    @property
    def default_params(self) -> Any:
        return self.env.default_params

    def observation_spaces(self, params: Any = None) -> dict[str, Space]:
        """ONE agent's observation space per team (batched tensors add ``[num_envs, A_team]``)."""
        return self.env.observation_spaces(params)

    def action_spaces(self, params: Any = None) -> dict[str, Space]:
        """ONE agent's action space per team (batched tensors add ``[num_envs, A_team]``)."""
        return self.env.action_spaces(params)

    def global_state_space(self, params: Any = None) -> Box:
        return self.env.global_state_space(params)

    def keys(self, key: torch.Tensor) -> torch.Tensor:
        """The ``[num_envs, 2]`` per-environment keys that ``reset``/``step`` derive from ``key``."""
        return random.split(key, self.num_envs)

    def _params(self, params: Any) -> Any:
        return self.env.default_params if params is None else params

    def reset(self, key: torch.Tensor, params: Any = None) -> tuple[Teams, Any]:
        """Reset every environment: observations ``team -> [num_envs, A_team, ...]`` and the state."""
        obs, state = self._reset(self.keys(key), self._params(params))

        # Leaves sliced from one draw come out strided; clone them dense so a compiled step sees
        # the layout of its own outputs and does not recompile on the second call.
        def dense(x: torch.Tensor) -> torch.Tensor:
            return x.clone(memory_format=torch.contiguous_format)

        return ftree.map(dense, obs), ftree.map(dense, state)

    def step(
        self, key: torch.Tensor, state: Any, actions: Teams, params: Any = None
    ) -> tuple[Teams, Any, Teams, Teams, Teams, dict[str, Any]]:
        """Step every environment (auto-reset per environment); outputs have ``[num_envs]`` first."""
        params = self._params(params)
        self._check(actions, params)
        return self._step_with(self._draw_step(self.keys(key), params), state, actions, params)

    def step_env(
        self, key: torch.Tensor, state: Any, actions: Teams, params: Any = None
    ) -> tuple[Teams, Any, Teams, Teams, Teams, dict[str, Any]]:
        """The raw transition of every environment (no auto-reset)."""
        params = self._params(params)
        self._check(actions, params)
        return self._step_env(self.keys(key), state, actions, params)

    def global_state(self, state: Any, params: Any = None) -> torch.Tensor:
        """``[num_envs, S]``: each environment's global state."""
        return self._global_state(state, self._params(params))

    def _check(self, actions: Any, params: Any) -> None:
        if not control.is_traced():
            check_actions(actions, self.env.action_spaces(params), self.env.teams, (self.num_envs,))

    def __repr__(self) -> str:
        return f"vmap({self.env!r}, num_envs={self.num_envs})"


def vmap(env: MultiAgentEnv, num_envs: int) -> BatchedMultiAgentEnv:
    """``num_envs`` multi-agent environments behind the single-environment interface.

    Args:
        env: a multi-agent environment (e.g. from ``funrl.envs.marl.make``).
        num_envs: how many environments.

    Returns:
        A :class:`BatchedMultiAgentEnv`; its results are ``torch.func.vmap`` of ``env``'s over
        ``split(key, num_envs)``.
    """
    return BatchedMultiAgentEnv(env, num_envs)
