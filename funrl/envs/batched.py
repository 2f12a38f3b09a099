"""A batched view of a single-environment definition: N environments, one key, one call.

``funrl.envs.vmap(env, num_envs)`` returns an object with the environment interface whose
``reset``/``step`` take one key, split it into ``num_envs`` keys and ``torch.func.vmap`` the
single-environment function over them, so ``batched.step(key, ...)[i]`` equals
``env.step(split(key, num_envs)[i], ...[i])`` exactly (tested). ``draw_step``/``step_with`` batch
the same way (``step`` is their composition, as for one environment). Observations, states, rewards and
flags gain a leading ``[num_envs]`` dimension; so must the actions.

An environment that declares ``batch_polymorphic`` (its ``step_with`` broadcasts over a batch)
gets its ``step_with`` called on the whole batch as it is, without ``torch.func.vmap``, unless
params fields are batched: the same numbers, without vmap's per-op cost, which in eager mode was
most of a small env's step.

Domain randomisation: name the params fields that carry a leading ``[num_envs]`` dimension in
``batched_params`` (e.g. ``("gravity", "masspole")``); every other field is shared.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from funrl import random
from funrl import tree as ftree
from funrl.envs.core import Environment, Space

__all__ = ["BatchedEnv", "vmap"]


class BatchedEnv:
    """``num_envs`` copies of ``env`` stepped together; see :func:`vmap`."""

    def __init__(self, env: Environment, num_envs: int, batched_params: Sequence[str] = ()):
        if not isinstance(env, Environment):
            raise TypeError(f"env: expected a funrl.envs.Environment, got {type(env).__name__}")
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs: expected a positive int, got {num_envs!r}")
        if isinstance(batched_params, str):
            raise TypeError("batched_params: expected a sequence of field names, got a str")
        self.env = env
        self.num_envs = num_envs
        self.batched_params = tuple(batched_params)
        self._step_on_batch = getattr(env, "batch_polymorphic", False) and not self.batched_params
        field_names = {f.name for f in dataclasses.fields(env.default_params)}
        unknown = sorted(set(self.batched_params) - field_names)
        if unknown:
            raise ValueError(
                f"batched_params: {unknown} are not fields of {type(env.default_params).__name__}; "
                f"fields: {sorted(field_names)}"
            )

    @property
    def name(self) -> str:
        return f"{self.env.name}x{self.num_envs}"

    @property
    def default_params(self) -> Any:
        return self.env.default_params

    def observation_space(self, params: Any = None) -> Space:
        """The space of ONE environment's observation (batched ones add ``[num_envs]`` in front)."""
        return self.env.observation_space(params)

    def action_space(self, params: Any = None) -> Space:
        """The space of ONE environment's action (batched ones add ``[num_envs]`` in front)."""
        return self.env.action_space(params)

    # -- the per-environment function, vmapped -----------------------------------------------

    def _map(self, method: str, params: Any, *per_env: Any) -> Any:
        """``self.env.<method>(*per_env, params)`` for every environment: ``vmap`` over the leading
        dimension of every leaf of ``per_env`` and of the batched params fields."""
        shared, batched = self._split_params(params)

        def one_env(args: tuple[Any, ...], env_batched: dict[str, torch.Tensor]) -> Any:
            env_params = dataclasses.replace(shared, **env_batched) if env_batched else shared
            return getattr(self.env, method)(*args, env_params)

        return torch.func.vmap(one_env, randomness="error")(per_env, batched)

    # -- the batched interface --------------------------------------------------------------

    def _split_params(self, params: Any) -> tuple[Any, dict[str, torch.Tensor]]:
        params = self.env.default_params if params is None else params
        batched = {}
        for name in self.batched_params:
            value = getattr(params, name)
            if not isinstance(value, torch.Tensor) or value.dim() == 0 or value.shape[0] != self.num_envs:
                got = list(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
                raise ValueError(
                    f"params.{name}: expected a tensor with leading dimension num_envs="
                    f"{self.num_envs} (it is listed in batched_params), got {got}"
                )
            batched[name] = value
        return params, batched

    def keys(self, key: torch.Tensor) -> torch.Tensor:
        """The ``[num_envs, 2]`` per-environment keys that ``reset``/``step`` derive from ``key``."""
        return random.split(key, self.num_envs)

    def reset(self, key: torch.Tensor, params: Any = None) -> tuple[torch.Tensor, Any]:
        """Reset all environments: ``(obs [num_envs, ...], state)``."""
        obs, state = self._map("reset", params, self.keys(key))

        # Per-env fields sliced from one draw come out strided; step returns contiguous leaves, so
        # a compiled step would otherwise specialise (and recompile) on the first call's strides.
        # (clone, not contiguous(): a size-1 dim keeps its odd stride under contiguous()).
        def dense(x: torch.Tensor) -> torch.Tensor:
            return x.clone(memory_format=torch.contiguous_format)

        return dense(obs), ftree.map(dense, state)

    def draw_step(self, key: torch.Tensor, params: Any = None) -> Any:
        """Every environment's ``draw_step`` from its key of ``keys(key)`` (``[num_envs]`` first)."""
        return self._map("draw_step", params, self.keys(key))

    def step_with(
        self, draw: Any, state: Any, action: torch.Tensor, params: Any = None
    ) -> tuple[torch.Tensor, Any, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """``step`` given ``draw = draw_step(key, params)``."""
        self._check_batch(action)
        if self._step_on_batch:
            return self.env.step_with(draw, state, action, params)
        return self._map("step_with", params, draw, state, action)

    def step(
        self, key: torch.Tensor, state: Any, action: torch.Tensor, params: Any = None
    ) -> tuple[torch.Tensor, Any, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """Step all environments (auto-reset per environment); every output has ``[num_envs]`` first."""
        return self.step_with(self.draw_step(key, params), state, action, params)

    def step_env(
        self, key: torch.Tensor, state: Any, action: torch.Tensor, params: Any = None
    ) -> tuple[torch.Tensor, Any, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """The raw transition of all environments (no auto-reset)."""
        self._check_batch(action)
        return self._map("step_env", params, self.keys(key), state, action)

    def _check_batch(self, action: Any) -> None:
        if not isinstance(action, torch.Tensor):
            raise TypeError(f"action: expected a torch.Tensor, got {type(action).__name__}")
        if action.dim() == 0 or action.shape[0] != self.num_envs:
            raise ValueError(
                f"action: expected a leading dimension num_envs={self.num_envs}, "
                f"got shape {list(action.shape)}"
            )

    def __repr__(self) -> str:
        return f"vmap({self.env!r}, num_envs={self.num_envs})"


def vmap(env: Environment, num_envs: int, batched_params: Sequence[str] = ()) -> BatchedEnv:
    """``num_envs`` environments behind the single-environment interface, from one key per call.

    Args:
        env: a single-environment definition (e.g. from ``funrl.envs.make``).
        num_envs: how many environments.
        batched_params: names of params fields that hold one value per environment (a tensor
            with leading dimension ``num_envs``): domain randomisation in one call.

    Returns:
        A :class:`BatchedEnv` with ``reset(key, params)``, ``step(key, state, action, params)``
        and ``step_env``; results are those of ``torch.func.vmap`` over ``split(key, num_envs)``.
    """
    return BatchedEnv(env, num_envs, batched_params)
