"""Pure environment wrappers: each one is itself an :class:`~funrl.envs.core.Environment`.

A wrapper takes an environment and gives back one with the same ``reset``/``step`` signature, so
wrappers compose (``EpisodeStatistics(NormalizeObservation(env))``) and batch with ``vmap`` like
any environment. Nothing is held in the wrapper object but static configuration: a wrapper that
needs memory (running statistics, a frame stack) returns a NamedTuple state holding the inner
env's state in its ``env_state`` field plus its own fields; a stateless wrapper (``ScaleReward``,
``ClipAction``, ``FlattenObservation``, ``Validate``) passes the inner state through unchanged.

``step`` calls the inner ``step`` (auto-reset included) and ``step_env`` the inner raw
``step_env``; the wrapper's own logic is the same on both paths except where an auto-reset
changes what it must do (``FrameStack`` restarts its stack on a new episode).
Observation wrappers transform ``info["final_obs"]`` too, so a value bootstrapped from it sees
the same representation as the policy did.

Statistics follow gymnasium 1.x (``gymnasium.wrappers.NormalizeObservation``,
``NormalizeReward``, ``RecordEpisodeStatistics`` and their ``gymnasium.wrappers.vector``
versions): an observation carrying leading batch dimensions beyond the observation space's shape
(a batched env view) updates one shared set of statistics with the whole batch, as gymnasium's
vector wrappers do; a single environment updates with a batch of one, as gymnasium's single-env
wrappers do. Under ``vmap`` of a single-env wrapper each environment keeps its own statistics.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from funrl import control
from funrl.envs.core import Box, Discrete, Environment, Space

__all__ = [
    "Wrapper",
    "EpisodeStatistics",
    "EpisodeStatisticsState",
    "RunningMeanStd",
    "update_running_mean_std",
    "NormalizeObservation",
    "NormalizeObservationState",
    "NormalizeReward",
    "NormalizeRewardState",
    "ScaleReward",
    "ClipAction",
    "FlattenObservation",
    "FrameStack",
    "FrameStackState",
    "Validate",
]

StepOut = tuple[torch.Tensor, Any, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]


_ENV_METHODS = (
    "reset",
    "step",
    "draw_step",
    "step_with",
    "step_env",
    "observation_space",
    "action_space",
    "default_params",
)


class Wrapper(Environment):
    """Base of wrappers: delegates everything to ``env``; subclasses override the hooks.

    Hooks: ``_on_reset(obs, env_state, params) -> (obs, state)`` and
    ``_on_step(inner_step, key, state, action, params, auto_reset) -> step tuple`` where
    ``inner_step`` is the inner env's ``step_with`` (``auto_reset=True``; ``key`` is then the
    inner env's draws, see ``Environment.draw_step``) or ``step_env``: hooks pass ``key`` on
    untouched.
    Params are the inner env's params: wrapper options are static constructor arguments.
    """

    polymorphic_hooks: bool = False
    """True where the hooks work per env and broadcast over leading batch dimensions (nothing is
    computed across the batch): the wrapper is then batch-polymorphic wherever its env is."""

    def __init__(self, env: Environment) -> None:
        # Duck-typed so that batched views (``funrl.envs.vmap(env, n)``) can be wrapped too.
        missing = [name for name in _ENV_METHODS if not hasattr(env, name)]
        if missing:
            raise TypeError(
                f"env: expected a funrl Environment, got {type(env).__name__} (missing {missing})"
            )
        self.env = env

    @property
    def name(self) -> str:
        return f"{type(self).__name__}({self.env.name})"

    @property
    def batch_polymorphic(self) -> bool:  # type: ignore[override]
        """See ``Environment.batch_polymorphic``: the hooks' and the wrapped env's."""
        return self.polymorphic_hooks and getattr(self.env, "batch_polymorphic", False)

    @property
    def unwrapped(self) -> Environment:
        """The innermost environment (through wrappers and batched views, which all hold ``env``)."""
        env = self.env
        while hasattr(env, "env"):
            env = env.env
        return env

    @property
    def default_params(self) -> Any:
        return self.env.default_params

    def observation_space(self, params: Any = None) -> Space:
        return self.env.observation_space(params)

    def action_space(self, params: Any = None) -> Space:
        return self.env.action_space(params)

    def _on_reset(self, obs: torch.Tensor, env_state: Any, params: Any) -> tuple[torch.Tensor, Any]:
        return obs, env_state

    def _on_step(
        self,
        inner_step: Any,
        key: torch.Tensor,
        state: Any,
        action: torch.Tensor,
        params: Any,
        auto_reset: bool,
    ) -> StepOut:
        return inner_step(key, state, action, params)

    def reset_env(self, key: torch.Tensor, params: Any) -> tuple[torch.Tensor, Any]:
        obs, env_state = self.env.reset(key, params)
        return self._on_reset(obs, env_state, params)

    def step_env(self, key: torch.Tensor, state: Any, action: torch.Tensor, params: Any) -> StepOut:
        return self._on_step(self.env.step_env, key, state, action, params, auto_reset=False)

    def draw_step(self, key: torch.Tensor, params: Any = None) -> Any:
        """The inner env's draws: the auto-reset happens inside the inner env's step."""
        return self.env.draw_step(key, params)

    def step_with(self, draw: Any, state: Any, action: torch.Tensor, params: Any = None) -> StepOut:
        params = self.default_params if params is None else params
        return self._on_step(self.env.step_with, draw, state, action, params, auto_reset=True)

    def step(self, key: torch.Tensor, state: Any, action: torch.Tensor, params: Any = None) -> StepOut:
        return self.step_with(self.draw_step(key, params), state, action, params)

    def __repr__(self) -> str:
        return self.name


def _batch_shape(x: torch.Tensor, event_shape: tuple[int, ...], name: str) -> tuple[int, ...]:
    """The leading dimensions of ``x`` in front of ``event_shape`` (static shapes: compile-safe)."""
    n = len(event_shape)
    if x.dim() < n or tuple(x.shape[x.dim() - n :]) != tuple(event_shape):
        raise ValueError(
            f"{name}: expected shape [..., {', '.join(map(str, event_shape))}], got {list(x.shape)}"
        )
    return tuple(x.shape[: x.dim() - n])


# --------------------------------------------------------------------------------------------
# EpisodeStatistics
# --------------------------------------------------------------------------------------------


class EpisodeStatisticsState(NamedTuple):
    env_state: Any
    episode_return: torch.Tensor  # return of the running episode so far (float32)
    episode_length: torch.Tensor  # steps of the running episode so far (int64)
    returned_episode_return: torch.Tensor  # return of the last finished episode
    returned_episode_length: torch.Tensor  # length of the last finished episode


class EpisodeStatistics(Wrapper):
    """Running episode return/length, and those of the episodes that finish, in ``info``.

    After each step ``info`` holds (all tensors, so they batch and compile):

    - ``"returned_episode"``: bool, an episode ended (``terminated | truncated``) on this step;
    - ``"returned_episode_return"``, ``"returned_episode_length"``: the return and length of the
      last finished episode (this step's where ``returned_episode``, else the previous one's);
    - ``"episode_return"``, ``"episode_length"``: of the running episode, before the reset.

    Training logs take ``info["returned_episode_return"][info["returned_episode"]]``: the same
    numbers gymnasium's ``RecordEpisodeStatistics`` puts in ``info["episode"]["r"]`` / ``["l"]``
    (gymnax's ``LogWrapper`` fields, with gymnasium's meaning). The return sums the raw
    rewards of the wrapped env; put it inside reward-changing wrappers to log raw returns.
    """

    polymorphic_hooks = True

    def _on_reset(self, obs: torch.Tensor, env_state: Any, params: Any) -> tuple[torch.Tensor, Any]:
        batch = _batch_shape(obs, self.env.observation_space(params).shape, "obs")
        zeros_f = torch.zeros(batch, dtype=torch.float32, device=obs.device)
        zeros_i = torch.zeros(batch, dtype=torch.int64, device=obs.device)
        return obs, EpisodeStatisticsState(env_state, zeros_f, zeros_i, zeros_f, zeros_i)

    def _on_step(self, inner_step, key, state, action, params, auto_reset):  # type: ignore[override]
        obs, env_state, reward, terminated, truncated, info = inner_step(key, state.env_state, action, params)
        done = terminated | truncated
        episode_return = state.episode_return + reward.to(state.episode_return.dtype)
        episode_length = state.episode_length + 1
        new_state = EpisodeStatisticsState(
            env_state=env_state,
            episode_return=torch.where(done, torch.zeros_like(episode_return), episode_return),
            episode_length=torch.where(done, torch.zeros_like(episode_length), episode_length),
            returned_episode_return=torch.where(done, episode_return, state.returned_episode_return),
            returned_episode_length=torch.where(done, episode_length, state.returned_episode_length),
        )
        info = dict(info)
        info["returned_episode"] = done
        info["returned_episode_return"] = new_state.returned_episode_return
        info["returned_episode_length"] = new_state.returned_episode_length
        info["episode_return"] = episode_return
        info["episode_length"] = episode_length
        return obs, new_state, reward, terminated, truncated, info


# --------------------------------------------------------------------------------------------
# Running mean / variance (gymnasium.wrappers.utils.RunningMeanStd as a pure function)
# --------------------------------------------------------------------------------------------


class RunningMeanStd(NamedTuple):
    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor  # a scalar; starts at 1e-4 as gymnasium's

    @staticmethod
    def init(
        shape: tuple[int, ...], dtype: torch.dtype = torch.float32, device: Any = None, epsilon: float = 1e-4
    ) -> RunningMeanStd:
        return RunningMeanStd(
            mean=torch.zeros(shape, dtype=dtype, device=device),
            var=torch.ones(shape, dtype=dtype, device=device),
            count=torch.full((), epsilon, dtype=dtype, device=device),
        )


PoolMoments = Callable[
    [torch.Tensor, torch.Tensor, int, torch.Tensor], tuple[torch.Tensor, torch.Tensor, int]
]
"""``pool(batch_mean, batch_var, batch_count, shift) -> (mean, var, count)`` of the union of
every process's equal-sized batch (``shift``: a value all share, the running mean); see
``funrl.distributed.pool_moments``, which data-parallel agents give the normalisation wrappers."""


def update_running_mean_std(
    rms: RunningMeanStd, x: torch.Tensor, pool: PoolMoments | None = None
) -> RunningMeanStd:
    """Merge a batch ``x`` of shape ``[B, *rms.mean.shape]`` into the statistics.

    Chan et al.'s parallel variance update, as ``gymnasium.wrappers.utils.RunningMeanStd.update``
    (population variance of the batch). In float32 the count stops growing past 2**24 samples,
    after which new batches keep a constant weight of about 6e-8 each; pass float64 statistics
    (``stats_dtype``) for longer runs. ``pool``: the batch is one process's share of a batch
    spread over processes (data parallelism), whose moments ``pool`` combines first.
    """
    x = x.to(rms.mean.dtype)
    batch_count = x.shape[0]
    batch_mean = x.mean(dim=0)
    batch_var = x.var(dim=0, correction=0)
    if pool is not None:
        batch_mean, batch_var, batch_count = pool(batch_mean, batch_var, batch_count, rms.mean)
    delta = batch_mean - rms.mean
    total = rms.count + batch_count
    mean = rms.mean + delta * (batch_count / total)
    m2 = rms.var * rms.count + batch_var * batch_count + delta.square() * (rms.count * batch_count / total)
    return RunningMeanStd(mean=mean, var=m2 / total, count=total)


# --------------------------------------------------------------------------------------------
# NormalizeObservation
# --------------------------------------------------------------------------------------------


class NormalizeObservationState(NamedTuple):
    env_state: Any
    obs_rms: RunningMeanStd


class NormalizeObservation(Wrapper):
    """Observations normalised by a running mean and variance carried in the state.

    ``(obs - mean) / sqrt(var + epsilon)`` after merging the observation into the statistics, as
    ``gymnasium.wrappers.NormalizeObservation`` (reset observations included; leading batch
    dimensions share statistics as in ``gymnasium.wrappers.vector.NormalizeObservation``).
    ``info["final_obs"]`` is normalised with the same (post-update) statistics as the returned
    observation and is not itself merged: gymnasium never sees it under SAME_STEP auto-reset
    either.

    ``update_stats=False`` (or ``.frozen()``) gives the evaluation mode: same state layout,
    statistics only read. Output dtype is ``stats_dtype`` (float32 by default, as gymnasium).
    ``pool`` (see :func:`update_running_mean_std`): the batch is this process's share of a
    data-parallel agent's environments, and the statistics are those of all of them.
    """

    def __init__(
        self,
        env: Environment,
        epsilon: float = 1e-8,
        update_stats: bool = True,
        stats_dtype: torch.dtype = torch.float32,
        pool: PoolMoments | None = None,
    ) -> None:
        super().__init__(env)
        if not (isinstance(epsilon, (int, float)) and epsilon > 0):
            raise ValueError(f"epsilon: expected a positive float, got {epsilon!r}")
        if stats_dtype not in (torch.float32, torch.float64):
            raise TypeError(f"stats_dtype: expected torch.float32 or torch.float64, got {stats_dtype}")
        self.epsilon = float(epsilon)
        self.update_stats = bool(update_stats)
        self.stats_dtype = stats_dtype
        self.pool = pool

    def frozen(self) -> NormalizeObservation:
        """The same wrapper with statistics read but never updated (evaluation mode)."""
        return NormalizeObservation(self.env, self.epsilon, update_stats=False, stats_dtype=self.stats_dtype)

    def observation_space(self, params: Any = None) -> Space:
        shape = self.env.observation_space(params).shape
        return Box(low=-math.inf, high=math.inf, shape=shape, dtype=self.stats_dtype)

    def _normalise(
        self, rms: RunningMeanStd, obs: torch.Tensor, event_shape: tuple[int, ...], update: bool
    ) -> tuple[torch.Tensor, RunningMeanStd]:
        if update and self.update_stats:
            rms = update_running_mean_std(rms, obs.reshape((-1,) + tuple(event_shape)), self.pool)
        out = (obs.to(rms.mean.dtype) - rms.mean) / torch.sqrt(rms.var + self.epsilon)
        return out, rms

    def _on_reset(self, obs, env_state, params):  # type: ignore[override]
        shape = tuple(self.env.observation_space(params).shape)
        _batch_shape(obs, shape, "obs")
        rms = RunningMeanStd.init(shape, self.stats_dtype, obs.device)
        out, rms = self._normalise(rms, obs, shape, update=True)
        return out, NormalizeObservationState(env_state, rms)

    def _on_step(self, inner_step, key, state, action, params, auto_reset):  # type: ignore[override]
        obs, env_state, reward, terminated, truncated, info = inner_step(key, state.env_state, action, params)
        shape = tuple(self.env.observation_space(params).shape)
        out, rms = self._normalise(state.obs_rms, obs, shape, update=True)
        info = dict(info)
        if "final_obs" in info:
            info["final_obs"], _ = self._normalise(rms, info["final_obs"], shape, update=False)
        return out, NormalizeObservationState(env_state, rms), reward, terminated, truncated, info


# --------------------------------------------------------------------------------------------
# NormalizeReward / ScaleReward
# --------------------------------------------------------------------------------------------


class NormalizeRewardState(NamedTuple):
    env_state: Any
    discounted_return: torch.Tensor  # per env (batch shape of the reward)
    return_rms: RunningMeanStd  # scalar statistics of the discounted return


class NormalizeReward(Wrapper):
    """Rewards divided by the running standard deviation of a discounted return.

    Gymnasium 1.x's rule (``gymnasium.wrappers.vector.NormalizeReward`` under SAME_STEP
    auto-reset, which is funrl's): ``G <- G * gamma * (1 - terminated) + r``; merge ``G`` into
    the scalar statistics; ``r / sqrt(var + epsilon)`` (no mean subtraction); then ``G <- 0``
    where the episode ended (terminated or truncated). ``update_stats=False`` / ``.frozen()``
    reads the statistics without updating them. ``pool`` as :class:`NormalizeObservation`'s.
    """

    def __init__(
        self,
        env: Environment,
        gamma: float = 0.99,
        epsilon: float = 1e-8,
        update_stats: bool = True,
        stats_dtype: torch.dtype = torch.float32,
        pool: PoolMoments | None = None,
    ) -> None:
        super().__init__(env)
        if not (isinstance(gamma, (int, float)) and 0.0 <= gamma <= 1.0):
            raise ValueError(f"gamma: expected a float in [0, 1], got {gamma!r}")
        if not (isinstance(epsilon, (int, float)) and epsilon > 0):
            raise ValueError(f"epsilon: expected a positive float, got {epsilon!r}")
        if stats_dtype not in (torch.float32, torch.float64):
            raise TypeError(f"stats_dtype: expected torch.float32 or torch.float64, got {stats_dtype}")
        self.gamma = float(gamma)
        self.epsilon = float(epsilon)
        self.update_stats = bool(update_stats)
        self.stats_dtype = stats_dtype
        self.pool = pool

    def frozen(self) -> NormalizeReward:
        """The same wrapper with statistics read but never updated (evaluation mode)."""
        return NormalizeReward(self.env, self.gamma, self.epsilon, False, self.stats_dtype)

    def _on_reset(self, obs, env_state, params):  # type: ignore[override]
        batch = _batch_shape(obs, self.env.observation_space(params).shape, "obs")
        discounted = torch.zeros(batch, dtype=self.stats_dtype, device=obs.device)
        return obs, NormalizeRewardState(
            env_state, discounted, RunningMeanStd.init((), self.stats_dtype, obs.device)
        )

    def _on_step(self, inner_step, key, state, action, params, auto_reset):  # type: ignore[override]
        obs, env_state, reward, terminated, truncated, info = inner_step(key, state.env_state, action, params)
        continuing = (~terminated).to(self.stats_dtype)
        discounted = state.discounted_return * self.gamma * continuing + reward.to(self.stats_dtype)
        rms = state.return_rms
        if self.update_stats:
            rms = update_running_mean_std(rms, discounted.reshape(-1), self.pool)
        normalised = (reward.to(self.stats_dtype) / torch.sqrt(rms.var + self.epsilon)).to(reward.dtype)
        discounted = torch.where(terminated | truncated, torch.zeros_like(discounted), discounted)
        return obs, NormalizeRewardState(env_state, discounted, rms), normalised, terminated, truncated, info


class ScaleReward(Wrapper):
    """Rewards multiplied by a constant ``scale`` (stateless)."""

    polymorphic_hooks = True

    def __init__(self, env: Environment, scale: float) -> None:
        super().__init__(env)
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
            raise ValueError(f"scale: expected a finite float, got {scale!r}")
        self.scale = float(scale)

    def _on_step(self, inner_step, key, state, action, params, auto_reset):  # type: ignore[override]
        obs, state, reward, terminated, truncated, info = inner_step(key, state, action, params)
        return obs, state, reward * self.scale, terminated, truncated, info


# --------------------------------------------------------------------------------------------
# ClipAction, FlattenObservation
# --------------------------------------------------------------------------------------------


class ClipAction(Wrapper):
    """Continuous actions clipped into the inner ``Box`` action space (gymnasium's ``ClipAction``).

    The wrapper's own action space is unbounded, as gymnasium declares it.
    """

    polymorphic_hooks = True

    def __init__(self, env: Environment) -> None:
        super().__init__(env)
        space = env.action_space(env.default_params)
        if not isinstance(space, Box) or not space.dtype.is_floating_point:
            raise TypeError(f"env: ClipAction needs a floating Box action space, got {space!r}")

    def action_space(self, params: Any = None) -> Space:
        inner = self.env.action_space(params)
        return Box(low=-math.inf, high=math.inf, shape=inner.shape, dtype=inner.dtype)

    def _on_step(self, inner_step, key, state, action, params, auto_reset):  # type: ignore[override]
        space = self.env.action_space(params)
        clipped = torch.clamp(action, space.low_tensor(action.device), space.high_tensor(action.device))
        return inner_step(key, state, clipped, params)


def _box_of(space: Space, wrapper: str) -> Box:
    if not isinstance(space, Box):
        raise TypeError(f"env: {wrapper} needs a Box observation space, got {space!r}")
    return space


# Bounds are rebuilt in plain Python (no tensors) so that spaces can be asked for inside a traced step.
def _flat_bound(bound: float | tuple) -> float | tuple:
    if not isinstance(bound, (tuple, list)):
        return bound
    out: list = []
    for b in bound:
        flat = _flat_bound(b)
        out.extend(flat if isinstance(flat, tuple) else (flat,))
    return tuple(out)


def _stacked_bound(bound: float | tuple, num_frames: int) -> float | tuple:
    return bound if not isinstance(bound, (tuple, list)) else (tuple(bound),) * num_frames


class FlattenObservation(Wrapper):
    """Observations flattened to one dimension (``final_obs`` too); stateless."""

    def __init__(self, env: Environment) -> None:
        super().__init__(env)
        _box_of(env.observation_space(env.default_params), "FlattenObservation")

    def observation_space(self, params: Any = None) -> Space:
        inner = _box_of(self.env.observation_space(params), "FlattenObservation")
        n = math.prod(inner.shape)
        return Box(low=_flat_bound(inner.low), high=_flat_bound(inner.high), shape=(n,), dtype=inner.dtype)

    def _flatten(self, obs: torch.Tensor, params: Any) -> torch.Tensor:
        shape = tuple(self.env.observation_space(params).shape)
        batch = _batch_shape(obs, shape, "obs")
        return obs.reshape(batch + (math.prod(shape),))

    def _on_reset(self, obs, env_state, params):  # type: ignore[override]
        return self._flatten(obs, params), env_state

    def _on_step(self, inner_step, key, state, action, params, auto_reset):  # type: ignore[override]
        obs, state, reward, terminated, truncated, info = inner_step(key, state, action, params)
        info = dict(info)
        if "final_obs" in info:
            info["final_obs"] = self._flatten(info["final_obs"], params)
        return self._flatten(obs, params), state, reward, terminated, truncated, info


# --------------------------------------------------------------------------------------------
# FrameStack
# --------------------------------------------------------------------------------------------


class FrameStackState(NamedTuple):
    env_state: Any
    frames: torch.Tensor  # [..., num_frames, *obs_shape], oldest first


class FrameStack(Wrapper):
    """The last ``num_frames`` observations stacked on a new axis in front of the observation's.

    As ``gymnasium.wrappers.FrameStackObservation(env, num_frames)`` with its default
    ``padding_type="reset"``: a new episode's stack is its first observation repeated.
    On auto-reset ``info["final_obs"]`` is the stack ending in the final observation.
    """

    def __init__(self, env: Environment, num_frames: int) -> None:
        super().__init__(env)
        if isinstance(num_frames, bool) or not isinstance(num_frames, int) or num_frames < 1:
            raise ValueError(f"num_frames: expected a positive int, got {num_frames!r}")
        _box_of(env.observation_space(env.default_params), "FrameStack")
        self.num_frames = num_frames

    def observation_space(self, params: Any = None) -> Space:
        inner = _box_of(self.env.observation_space(params), "FrameStack")
        shape = (self.num_frames,) + tuple(inner.shape)
        return Box(
            low=_stacked_bound(inner.low, self.num_frames),
            high=_stacked_bound(inner.high, self.num_frames),
            shape=shape,
            dtype=inner.dtype,
        )

    def _repeat(self, obs: torch.Tensor, event_dims: int) -> torch.Tensor:
        axis = obs.dim() - event_dims
        return obs.unsqueeze(axis).expand(obs.shape[:axis] + (self.num_frames,) + obs.shape[axis:]).clone()

    def _push(self, frames: torch.Tensor, obs: torch.Tensor, event_dims: int) -> torch.Tensor:
        axis = obs.dim() - event_dims
        return torch.cat([frames.narrow(axis, 1, self.num_frames - 1), obs.unsqueeze(axis)], dim=axis)

    def _on_reset(self, obs, env_state, params):  # type: ignore[override]
        event_dims = len(self.env.observation_space(params).shape)
        frames = self._repeat(obs, event_dims)
        return frames, FrameStackState(env_state, frames)

    def _on_step(self, inner_step, key, state, action, params, auto_reset):  # type: ignore[override]
        obs, env_state, reward, terminated, truncated, info = inner_step(key, state.env_state, action, params)
        event_dims = len(self.env.observation_space(params).shape)
        info = dict(info)
        if auto_reset:
            final_frames = self._push(state.frames, info["final_obs"], event_dims)
            done = terminated | truncated
            done = done.reshape(done.shape + (1,) * (final_frames.dim() - done.dim()))
            frames = torch.where(done, self._repeat(obs, event_dims), final_frames)
            info["final_obs"] = final_frames
        else:
            frames = self._push(state.frames, obs, event_dims)
        return frames, FrameStackState(env_state, frames), reward, terminated, truncated, info


# --------------------------------------------------------------------------------------------
# Validate
# --------------------------------------------------------------------------------------------


def _check_in_space(x: Any, space: Space, name: str) -> tuple[int, ...]:
    """Raise a ValueError/TypeError unless ``x`` is a tensor of ``space`` (leading batch dims allowed)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    if isinstance(space, Discrete):
        if x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool:
            raise TypeError(f"{name}: expected an integer tensor for {space!r}, got dtype {x.dtype}")
    elif x.dtype != space.dtype:
        raise TypeError(f"{name}: expected dtype {space.dtype} for {space!r}, got {x.dtype}")
    batch = _batch_shape(x, tuple(space.shape), name)
    if x.dtype.is_floating_point and not bool(torch.isfinite(x).all()) and isinstance(space, Box):
        finite_bounds = bool(
            torch.isfinite(space.low_tensor()).all() & torch.isfinite(space.high_tensor()).all()
        )
        if finite_bounds or bool(torch.isnan(x).any()):
            raise ValueError(f"{name}: expected finite values in {space!r}, got NaN or inf")
    if not bool(space.contains(x)):
        raise ValueError(f"{name}: values outside {space!r}: {x.tolist() if x.numel() <= 16 else '(large)'}")
    return batch


class Validate(Wrapper):
    """Checks every reset and step in eager mode, for debugging; a no-op on values.

    Actions must be tensors of the action space (dtype, trailing shape, bounds); observations
    (and ``info["final_obs"]``) must lie in the observation space; rewards must be finite floats
    and ``terminated`` / ``truncated`` bool tensors of the batch shape. Violations raise a
    ValueError/TypeError naming the argument. The checks read values on the host, so this
    wrapper refuses to run under ``torch.compile`` or a ``torch.func`` transform: apply it to a batched view
    (leading batch dimensions are accepted) and drop it for compiled runs.
    """

    def _refuse_traced(self) -> None:
        if control.is_traced():
            raise RuntimeError(
                "Validate: the checks read values on the host and cannot run under torch.compile or "
                "a torch.func transform (vmap, grad); validate eagerly (a batched view is accepted) "
                "and remove Validate for traced runs"
            )

    def _check_obs(self, obs: torch.Tensor, params: Any, name: str) -> tuple[int, ...]:
        return _check_in_space(obs, self.env.observation_space(params), name)

    def _on_reset(self, obs, env_state, params):  # type: ignore[override]
        self._refuse_traced()
        self._check_obs(obs, params, "obs")
        return obs, env_state

    def _on_step(self, inner_step, key, state, action, params, auto_reset):  # type: ignore[override]
        self._refuse_traced()
        _check_in_space(action, self.env.action_space(params), "action")
        obs, state, reward, terminated, truncated, info = inner_step(key, state, action, params)
        batch = self._check_obs(obs, params, "obs")
        if "final_obs" in info:
            self._check_obs(info["final_obs"], params, 'info["final_obs"]')
        if not isinstance(reward, torch.Tensor) or not reward.dtype.is_floating_point:
            raise TypeError(
                f"reward: expected a floating tensor, got {getattr(reward, 'dtype', type(reward))}"
            )
        if tuple(reward.shape) != batch:
            raise ValueError(f"reward: expected shape {list(batch)}, got {list(reward.shape)}")
        if not bool(torch.isfinite(reward).all()):
            raise ValueError("reward: expected finite values, got NaN or inf")
        for flag_name, flag in (("terminated", terminated), ("truncated", truncated)):
            if not isinstance(flag, torch.Tensor) or flag.dtype != torch.bool:
                raise TypeError(
                    f"{flag_name}: expected a bool tensor, got {getattr(flag, 'dtype', type(flag))}"
                )
            if tuple(flag.shape) != batch:
                raise ValueError(f"{flag_name}: expected shape {list(batch)}, got {list(flag.shape)}")
        return obs, state, reward, terminated, truncated, info
