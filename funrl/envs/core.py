"""The pure environment interface: single-environment functions, batched with ``vmap``.

The shape is gymnax's (``gymnax/environments/environment.py``), with gymnasium's split of the end
of an episode into ``terminated`` (the MDP reached a terminal state: do not bootstrap) and
``truncated`` (the time limit in ``params`` ran out: bootstrap from ``info["final_obs"]``)::

    env, params = funrl.envs.make("CartPole-v1")
    obs, state = env.reset(key, params)
    obs, state, reward, terminated, truncated, info = env.step(key, state, action, params)

``step`` auto-resets: where the episode ended it returns the first observation and state of a
new episode and keeps the last observation of the old one in ``info["final_obs"]``.
``step_env`` and ``reset_env`` are the raw transition and reset that each environment defines.

``step`` is two functions composed, ``step_with(draw_step(key, params), state, action, params)``:
``draw_step`` is everything the step takes from its key (the key of ``step_env`` and the reset
that replaces the state where an episode ends), ``step_with`` the transition given those draws.
A rollout draws all its steps' values in one batched call before its loop
(``vmap(draw_step)`` over the steps' keys): one call instead of one per step, which is most of an
eager step's work, and a lighter loop body when compiled. The price is memory: a ``[T, ...]``
reset state per environment for a ``T``-step rollout. An environment defines ``reset_env``,
``step_env`` (and ``step_keys`` if its ``step_env`` draws nothing); a class that changes how the
auto-reset combines them overrides ``draw_step``/``step_with`` (a class that overrides ``step``
alone is refused when it is defined: rollouts would bypass it).
States are NamedTuples (with the episode time in them); params are frozen dataclasses
whose fields may be floats or tensors (a tensor field can be vmapped: domain randomisation).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Generic, NamedTuple, TypeVar

import torch

from funrl import random
from funrl import tree as ftree

__all__ = [
    "Environment",
    "EnvParams",
    "Space",
    "Discrete",
    "Box",
    "StepResult",
]

TState = TypeVar("TState")
TParams = TypeVar("TParams")


class StepResult(NamedTuple):
    """What ``step`` returns, for code that prefers names to positions."""

    obs: torch.Tensor
    state: Any
    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    info: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class EnvParams:
    """Base of environment parameters. ``max_steps_in_episode`` is the truncation limit."""

    max_steps_in_episode: int = 1000


class Space:
    """Describes the shape, dtype and bounds of observations or actions."""

    shape: tuple[int, ...]
    dtype: torch.dtype

    def sample(self, key: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def contains(self, x: torch.Tensor) -> torch.Tensor:
        """Elementwise-reduced membership test; a boolean scalar tensor (no host sync)."""
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class Discrete(Space):
    """Integers ``0 .. n-1`` (scalar, int64)."""

    n: int
    shape: tuple[int, ...] = ()
    dtype: torch.dtype = torch.int64

    def sample(self, key: torch.Tensor) -> torch.Tensor:
        return random.randint(key, self.shape, 0, self.n)

    def contains(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.as_tensor(x)
        ok = (x >= 0) & (x < self.n) & (x == torch.floor(x) if x.dtype.is_floating_point else True)
        return torch.as_tensor(ok).all()


def _bound_values(bound: Any) -> tuple[list[Any], tuple[int, ...]]:
    """The numbers (or 0-d tensors) of a nested-tuple bound, flattened, and its nesting shape."""
    if not isinstance(bound, (tuple, list)):
        return [bound], ()
    parts = [_bound_values(b) for b in bound]
    inner = parts[0][1] if parts else ()
    return [v for values, _ in parts for v in values], (len(bound), *inner)


def _bound_tensor(
    bound: Any, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str | None
) -> torch.Tensor:
    """``bound`` (a number, tensor or nested tuple of them) as a tensor of ``shape``.

    Stacked from its numbers one by one: a tensor built from a tuple of more than 8 numbers inside
    a compiled loop body is a graph constant that inductor (torch 2.13) leaves unbound there, and
    spaces are asked for inside compiled steps (``ClipAction``).
    """
    values, nesting = _bound_values(bound)
    parts = [torch.as_tensor(v, dtype=dtype, device=device) for v in values]
    return torch.stack(parts).reshape((*nesting, *parts[0].shape)).expand(shape)


@dataclasses.dataclass(frozen=True)
class Box(Space):
    """A box ``[low, high]`` of the given shape; ``low``/``high`` are floats or nested tuples."""

    low: float | tuple
    high: float | tuple
    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32

    def low_tensor(self, device: torch.device | str | None = None) -> torch.Tensor:
        return _bound_tensor(self.low, self.shape, self.dtype, device)

    def high_tensor(self, device: torch.device | str | None = None) -> torch.Tensor:
        return _bound_tensor(self.high, self.shape, self.dtype, device)

    def sample(self, key: torch.Tensor) -> torch.Tensor:
        low = self.low_tensor(key.device)
        high = self.high_tensor(key.device)
        if self.dtype.is_floating_point:
            # Unbounded sides sample from a normal, as gymnasium's Box does.
            finite_low = torch.isfinite(low)
            finite_high = torch.isfinite(high)
            k_u, k_n = random.split(key)
            u = random.uniform(k_u, self.shape, self.dtype)
            n = random.normal(k_n, self.shape, self.dtype)
            bounded = low + u * (high - low)
            return torch.where(
                finite_low & finite_high,
                bounded,
                torch.where(finite_low, low + n.abs(), torch.where(finite_high, high - n.abs(), n)),
            )
        return random.randint(key, self.shape, low.to(torch.int64), high.to(torch.int64) + 1).to(self.dtype)

    def contains(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.as_tensor(x)
        low = self.low_tensor(x.device)
        high = self.high_tensor(x.device)
        return ((x >= low) & (x <= high)).all()


def _where_tree(done: torch.Tensor, if_done: Any, if_not: Any) -> Any:
    def select(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        d = done.reshape(done.shape + (1,) * (a.dim() - done.dim()))
        return torch.where(d, a, b)

    return ftree.map(select, if_done, if_not)


class Environment(Generic[TState, TParams]):
    """Base class of pure environments. Subclasses define ``default_params``, ``reset_env``,
    ``step_env``, ``observation_space`` and ``action_space``; nothing here holds state."""

    batch_polymorphic: bool = False
    """True where ``step_with`` also takes a batch as it is: states, actions and draws with the
    same leading dimensions (the batch shape is ``state.time``'s), every op broadcasting over them,
    and a ``step_env`` that draws nothing from its key. ``funrl.envs.vmap`` then calls
    ``step_with`` on the whole batch instead of through ``torch.func.vmap``: the same numbers
    (tested for every env that sets it), without vmap's per-op cost in eager mode."""

    @property
    def name(self) -> str:
        return type(self).__name__

    @property
    def default_params(self) -> TParams:
        raise NotImplementedError

    def reset_env(self, key: torch.Tensor, params: TParams) -> tuple[torch.Tensor, TState]:
        raise NotImplementedError

    def step_env(
        self, key: torch.Tensor, state: TState, action: torch.Tensor, params: TParams
    ) -> tuple[torch.Tensor, TState, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        raise NotImplementedError

    def observation_space(self, params: TParams | None = None) -> Space:
        raise NotImplementedError

    def action_space(self, params: TParams | None = None) -> Space:
        raise NotImplementedError

    def step_keys(self, key: torch.Tensor, params: TParams) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys ``step`` hands to ``step_env`` and to ``reset_env``: ``split(key)``.

        A compiled batch computes the reset of every environment on every step (branch-free), so
        key derivation is paid per env-step. An environment whose ``step_env`` draws nothing
        overrides this to return ``(key, key)``: ``reset_env`` then draws from ``key`` itself and
        the split (two Threefry blocks per env-step) is skipped. Any pure choice keeps
        ``vmap(step)(keys)[i] == step(keys[i])``.
        """
        key_step, key_reset = random.split(key)
        return key_step, key_reset

    def reset(self, key: torch.Tensor, params: TParams | None = None) -> tuple[torch.Tensor, TState]:
        """First observation and state of an episode."""
        params = self.default_params if params is None else params
        return self.reset_env(key, params)

    def draw_step(self, key: torch.Tensor, params: TParams | None = None) -> Any:
        """What ``step(key, ...)`` draws from ``key``: ``(key_step, (obs_reset, state_reset))``,
        the key ``step_env`` gets and the reset an ending episode is replaced with. It depends on
        the key and params only, so a rollout draws every step's values before its loop."""
        params = self.default_params if params is None else params
        key_step, key_reset = self.step_keys(key, params)
        return key_step, self.reset_env(key_reset, params)

    def step_with(
        self, draw: Any, state: TState, action: torch.Tensor, params: TParams | None = None
    ) -> tuple[torch.Tensor, TState, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """``step`` given ``draw = draw_step(key, params)``: the raw transition, then the drawn
        reset wherever the episode ended; ``info["final_obs"]`` is the pre-reset observation."""
        params = self.default_params if params is None else params
        key_step, (obs_reset, state_reset) = draw
        obs_step, state_step, reward, terminated, truncated, info = self.step_env(
            key_step, state, action, params
        )
        done = terminated | truncated
        state = _where_tree(done, state_reset, state_step)
        obs = _where_tree(done, obs_reset, obs_step)
        info = dict(info)
        info["final_obs"] = obs_step
        return obs, state, reward, terminated, truncated, info

    def step(
        self,
        key: torch.Tensor,
        state: TState,
        action: torch.Tensor,
        params: TParams | None = None,
    ) -> tuple[torch.Tensor, TState, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """One transition with auto-reset: ``step_with(draw_step(key, params), ...)``."""
        return self.step_with(self.draw_step(key, params), state, action, params)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # Rollouts call draw_step and step_with, not step: a step overridden alone would be
        # silently bypassed there.
        if "step" in cls.__dict__ and "step_with" not in cls.__dict__:
            raise TypeError(
                f"{cls.__name__}: override draw_step and step_with (or reset_env and step_env), not "
                "step alone: step is step_with(draw_step(key, params), ...) and rollouts call those two"
            )

    def __repr__(self) -> str:
        return f"{self.name}()"


def time_limit_reached(time: torch.Tensor, params: EnvParams) -> torch.Tensor:
    """``time >= params.max_steps_in_episode``, as gymnasium's ``TimeLimit`` truncates."""
    return time >= params.max_steps_in_episode


def angle_normalize(x: torch.Tensor) -> torch.Tensor:
    """Wrap an angle to ``[-pi, pi)``, as gymnasium's Pendulum does."""
    return torch.remainder(x + math.pi, 2 * math.pi) - math.pi


def params_from_kwargs(params_cls: type, env_id: str, kwargs: dict[str, Any]) -> Any:
    """``params_cls(**kwargs)`` for ``make``: gymnasium's ``max_episode_steps`` is accepted as the
    name of ``max_steps_in_episode``; an unknown keyword is a ``TypeError`` listing the known ones."""
    kwargs = dict(kwargs)
    if "max_episode_steps" in kwargs:
        kwargs["max_steps_in_episode"] = kwargs.pop("max_episode_steps")
    names = [f.name for f in dataclasses.fields(params_cls)]
    unknown = sorted(set(kwargs) - set(names))
    if unknown:
        raise TypeError(
            f"{env_id}: unknown option(s) {unknown}; known: {', '.join(names + ['max_episode_steps'])}"
        )
    return params_cls(**kwargs)


def check_action_static(
    action: Any, space: Space, name: str = "action", batch_shape: tuple[int, ...] | torch.Size = ()
) -> None:
    """Static checks of an action against ``space`` (type, dtype kind, shape): no host sync, so
    they are free inside compiled code. Range checks need the values: ``funrl.envs.checker``.

    ``batch_shape`` is the leading shape of a batch stepped as it is (a batch-polymorphic env
    passes its ``state.time.shape``, which is ``()`` for one env)."""
    if not isinstance(action, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(action).__name__}")
    if isinstance(space, Discrete):
        if action.dtype.is_floating_point or action.dtype.is_complex or action.dtype == torch.bool:
            raise TypeError(f"{name}: expected an integer tensor for {space}, got dtype {action.dtype}")
    elif isinstance(space, Box) and space.dtype.is_floating_point:
        if not action.dtype.is_floating_point:
            raise TypeError(f"{name}: expected a floating tensor for {space}, got dtype {action.dtype}")
    expected = (*batch_shape, *space.shape)
    if tuple(action.shape) != expected:
        which = "one env; vmap for a batch" if not batch_shape else f"a batch of shape {list(batch_shape)}"
        raise ValueError(f"{name}: expected shape {list(expected)} ({which}), got {list(action.shape)}")


def reset_uniform(
    key: torch.Tensor, num: int, low: float | torch.Tensor, high: float | torch.Tensor
) -> torch.Tensor:
    """``num`` float32 values uniform in ``[low, high)`` from ``ceil(num / 2)`` Threefry blocks.

    ``funrl.random.uniform`` spends one block per value (JAX's layout: ``y0 ^ y1``); a reset is
    drawn for every environment on every compiled step, so here both output words of a block
    become values (23 random mantissa bits each, as ``uniform``), halving that cost.
    """
    y0, y1 = random.block_words(key, ((num + 1) // 2,))
    words = torch.stack([y0, y1], dim=-1).reshape(-1)[:num]
    unit = (words >> 9).to(torch.float32) * 2.0**-23
    return torch.maximum(
        low + unit * (high - low), torch.as_tensor(low, dtype=torch.float32, device=key.device)
    )
