"""Bridges to gymnasium in both directions.

``to_gymnasium(env_id_or_env, num_envs)`` wraps a pure funrl environment as a
``gymnasium.vector.VectorEnv`` (gymnasium 1.x conventions), so SB3, CleanRL or any gymnasium
loop can train on it; one call steps all ``num_envs`` copies with ``vmap`` (optionally compiled).

``to_gymnasium_env(env_id_or_env)`` wraps one copy as a plain ``gymnasium.Env`` (numpy in and
out, no auto-reset: call ``reset`` after an episode ends, as with gymnasium's own envs), which
is what gymnasium's ``check_env``, ``gymnasium.make``-style loops and SB3's ``check_env``,
``DummyVecEnv`` or ``make_vec_env`` take. Both derive every funrl key from the seed given to
``reset(seed=...)``, so a seed fixes the whole run. (``funrl.envs.to_sb3_vec_env`` is the batched
SB3 ``VecEnv``, in :mod:`funrl.envs.sb3_bridge`.)

``from_gymnasium(id_or_env, num_envs)`` puts any gymnasium environment (a registered id, an env
factory, or a ready vector env) behind funrl's ``reset``/``step`` signature, returning batched
torch tensors, so funrl's agents and wrappers can run on it eagerly. It is **not pure**: the
gymnasium envs live on the host and change on every call. Its "state" is an opaque handle that
only checks it is the latest one, and it refuses to run under ``torch.compile`` or ``vmap``.

Training an agent on one (the agents add their wrappers, as for a funrl id)::

    env, _ = from_gymnasium("Hopper-v5", config.num_envs)  # any registered id
    agent = funrl.agents.ppo.make_train(config, env=env)
    state, metrics = funrl.agents.common.train(agent, funrl.random.key(0), compile=False)

One key per agent: several seeds need several agents, each with its own host env.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from funrl import control, random
from funrl.envs.checker import validate_action
from funrl.envs.core import Box, Discrete, Environment, EnvParams, Space, _where_tree
from funrl.envs.registry import make

__all__ = [
    "FunrlEnv",
    "FunrlVectorEnv",
    "to_gymnasium",
    "to_gymnasium_env",
    "HostEnvironment",
    "HostState",
    "from_gymnasium",
    "host_env_of",
]

_TORCH_TO_NUMPY = {
    torch.float32: np.float32,
    torch.float64: np.float64,
    torch.float16: np.float16,
    torch.int64: np.int64,
    torch.int32: np.int32,
    torch.int16: np.int16,
    torch.int8: np.int8,
    torch.uint8: np.uint8,
    torch.bool: np.bool_,
}
_NUMPY_TO_TORCH = {np.dtype(v): k for k, v in _TORCH_TO_NUMPY.items()}


def _check_num_envs(num_envs: Any) -> int:
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs: expected a positive int, got {num_envs!r}")
    return num_envs


# ------------------------------------------------------------------------------------------------
# Space conversion
# ------------------------------------------------------------------------------------------------


def space_to_gymnasium(space: Space) -> gym.Space:
    """A funrl ``Box``/``Discrete`` as the gymnasium space of the same shape, dtype and bounds."""
    if isinstance(space, Discrete):
        return gym.spaces.Discrete(space.n)
    if isinstance(space, Box):
        dtype = _TORCH_TO_NUMPY[space.dtype]
        if space.dtype == torch.bool:
            return gym.spaces.Box(0, 1, shape=tuple(space.shape), dtype=np.bool_)
        low = space.low_tensor().numpy().astype(dtype)
        high = space.high_tensor().numpy().astype(dtype)
        return gym.spaces.Box(low=low, high=high, shape=tuple(space.shape), dtype=dtype)
    raise TypeError(f"space: expected a funrl Box or Discrete, got {type(space).__name__}")


def space_from_gymnasium(space: gym.Space) -> Space:
    """A gymnasium ``Box``/``Discrete`` as the funrl space of the same shape, dtype and bounds."""
    if isinstance(space, gym.spaces.Discrete):
        if int(space.start) != 0:
            raise ValueError(f"space: funrl's Discrete starts at 0, got a Discrete with start={space.start}")
        return Discrete(int(space.n))
    if isinstance(space, gym.spaces.Box):
        dtype = _NUMPY_TO_TORCH.get(np.dtype(space.dtype))
        if dtype is None:
            raise TypeError(f"space: unsupported Box dtype {space.dtype}")
        if dtype == torch.bool:
            return Box(low=False, high=True, shape=tuple(space.shape), dtype=torch.bool)
        return Box(low=_bound(space.low), high=_bound(space.high), shape=tuple(space.shape), dtype=dtype)
    raise TypeError(f"space: expected a gymnasium Box or Discrete, got {type(space).__name__}")


def _bound(values: np.ndarray) -> float | tuple:
    flat = np.unique(values)
    if flat.size == 1:
        return flat.item()
    return values.tolist() if values.ndim > 1 else tuple(values.tolist())


# ------------------------------------------------------------------------------------------------
# funrl -> gymnasium
# ------------------------------------------------------------------------------------------------


class FunrlEnv(gym.Env):
    """One copy of a funrl environment as a ``gymnasium.Env`` (see :func:`to_gymnasium_env`).

    ``step`` is funrl's raw ``step_env``: the step that ends an episode (``terminated`` or the
    time limit's ``truncated``) returns its last observation, and the next episode starts with
    ``reset()``, as with gymnasium's own envs; ``info`` holds ``step_env``'s info as numpy.
    Observations come back as numpy arrays of the space's dtype, rewards as Python floats and
    flags as Python bools. Actions are checked: a wrong shape, kind or out-of-range value raises
    a ``TypeError``/``ValueError`` naming ``action``.

    Seeding: the ``n``-th ``reset`` or ``step`` call since ``reset(seed=s)`` draws from the key
    ``random.fold_in(random.key(s), n)`` (``n = 0, 1, ...``), so a seed fixes the whole run; a
    ``reset()`` without a seed continues the count (the constructor's ``seed`` starts it).
    Counter-based keys let the batched SB3 adapter derive any copy's next key in one call.
    """

    metadata = {"render_modes": []}

    def __init__(
        self, env: Environment, params: Any, seed: int = 0, device: str | torch.device = "cpu"
    ) -> None:
        self.env, self.params = env, params
        self.device = torch.device(device)
        self.render_mode = None
        self.observation_space = space_to_gymnasium(env.observation_space(params))
        self.action_space = space_to_gymnasium(env.action_space(params))
        self._obs_dtype = _TORCH_TO_NUMPY[env.observation_space(params).dtype]
        self._action_dtype = env.action_space(params).dtype
        self._seed_key = random.key(check_seed(seed)).to(self.device)
        self._calls = 0
        self._state: Any = None

    def _next_key(self) -> torch.Tensor:
        key = random.fold_in(self._seed_key, self._calls)
        self._calls += 1
        return key

    def _obs_out(self, obs: torch.Tensor) -> np.ndarray:
        return obs.detach().cpu().numpy().astype(self._obs_dtype, copy=False)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        if seed is not None:
            check_seed(seed)
        check_no_options(options)
        super().reset(seed=seed, options=options)
        if seed is not None:
            self._seed_key, self._calls = random.key(int(seed)).to(self.device), 0
        obs, self._state = self.env.reset(self._next_key(), self.params)
        return self._obs_out(obs), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self._state is None:
            raise RuntimeError("step: call reset() before step()")
        action = action_to_torch(action, self._action_dtype, self.device)
        validate_action(self.env, action, self.params)
        obs, self._state, reward, terminated, truncated, info = self.env.step_env(
            self._next_key(), self._state, action, self.params
        )
        return self._obs_out(obs), float(reward), bool(terminated), bool(truncated), info_to_numpy(info)

    def close(self) -> None:
        self._state = None


def check_no_options(options: dict | None) -> None:
    """funrl envs take their options in ``params``, not at reset: refuse non-empty reset options."""
    if options:
        raise ValueError(
            f"options: funrl envs take no reset options (set them in params), got {sorted(options)}"
        )


def action_to_torch(action: Any, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A numpy/Python action as a tensor of the action space's dtype; a float action for an
    integer space is refused (a cast would silently truncate it)."""
    array = np.asarray(action)
    if not dtype.is_floating_point and not (
        np.issubdtype(array.dtype, np.integer) or array.dtype == np.bool_
    ):
        raise TypeError(f"action: expected integers for a {dtype} action space, got dtype {array.dtype}")
    return torch.as_tensor(array, device=device).to(dtype)


def info_to_numpy(info: dict[str, Any]) -> dict[str, Any]:
    """funrl's info tensors as numpy arrays (0-d ones as Python scalars), as gymnasium's envs give."""
    return {name: _to_numpy(value) for name, value in info.items()}


def _to_numpy(value: Any) -> Any:
    if not isinstance(value, torch.Tensor):
        return value
    return value.item() if value.dim() == 0 else value.detach().cpu().numpy()


class FunrlVectorEnv(gym.vector.VectorEnv):
    """``num_envs`` copies of a funrl environment as a gymnasium ``VectorEnv``.

    Autoreset follows gymnasium 1.x's declared ``metadata["autoreset_mode"]``:

    - ``NEXT_STEP`` (default, what gymnasium's own vector envs and all its vector wrappers use):
      the step that ends an episode returns its last observation; the next ``step`` call
      ignores that env's action and returns the first observation of a new episode with
      reward 0 and both flags False.
    - ``SAME_STEP`` (funrl's own convention): the ending step already returns the new episode's
      first observation; the last one is in ``info["final_obs"]`` (an object array, ``None``
      where no episode ended, with the mask ``info["_final_obs"]``).

    Observations come back as numpy arrays of the space's dtype, rewards as float64 and flags
    as bool (as ``SyncVectorEnv``). Seeding: ``reset(seed=s)`` makes the key ``random.key(s)``
    from which every later reset and step key is split, so a seed fixes the whole run.
    Without a seed the constructor's ``seed`` is used on the first reset.
    """

    def __init__(
        self,
        env: Environment,
        params: Any,
        num_envs: int,
        device: str | torch.device = "cpu",
        seed: int = 0,
        autoreset_mode: AutoresetMode = AutoresetMode.NEXT_STEP,
        compile: bool = False,
    ) -> None:
        if autoreset_mode not in (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP):
            raise ValueError(f"autoreset_mode: expected NEXT_STEP or SAME_STEP, got {autoreset_mode!r}")
        self.env, self.params = env, params
        self.num_envs = _check_num_envs(num_envs)
        self.device = torch.device(device)
        self.metadata = {"autoreset_mode": autoreset_mode, "render_modes": []}
        self.render_mode = None
        self.single_observation_space = space_to_gymnasium(env.observation_space(params))
        self.single_action_space = space_to_gymnasium(env.action_space(params))
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._action_dtype = env.action_space(params).dtype
        self._obs_dtype = _TORCH_TO_NUMPY[env.observation_space(params).dtype]
        self._key = random.key(seed).to(self.device)
        self._state: Any = None
        self._needs_reset = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        self._reset_fn = torch.func.vmap(lambda k: env.reset(k, params))
        self._step_env_fn = torch.func.vmap(lambda k, s, a: env.step_env(k, s, a, params))
        self._step_fn = torch.func.vmap(lambda k, s, a: env.step(k, s, a, params))
        if compile:
            self._step_env_fn = torch.compile(self._step_env_fn)
            self._step_fn = torch.compile(self._step_fn)

    @property
    def autoreset_mode(self) -> AutoresetMode:
        return self.metadata["autoreset_mode"]

    def _next_keys(self) -> torch.Tensor:
        self._key, sub = random.split(self._key)
        return random.split(sub, self.num_envs)

    def _obs_out(self, obs: torch.Tensor) -> np.ndarray:
        return obs.detach().cpu().numpy().astype(self._obs_dtype, copy=False)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise TypeError(f"seed: expected an int or None, got {type(seed).__name__}")
        super().reset(seed=seed, options=options)
        if seed is not None:
            self._key = random.key(seed).to(self.device)
        obs, self._state = self._reset_fn(self._next_keys())
        self._needs_reset = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        return self._obs_out(obs), {}

    def _actions_in(self, actions: Any) -> torch.Tensor:
        array = np.asarray(actions)
        expected = (self.num_envs, *self.single_action_space.shape)
        if array.shape != expected:
            raise ValueError(f"actions: expected shape {expected}, got {array.shape}")
        if isinstance(self.single_action_space, gym.spaces.Discrete) and not np.issubdtype(
            array.dtype, np.integer
        ):
            raise TypeError(
                f"actions: expected integers for {self.single_action_space}, got dtype {array.dtype}"
            )
        return torch.as_tensor(array, device=self.device).to(self._action_dtype)

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        if self._state is None:
            raise RuntimeError("step: call reset() before step()")
        action = self._actions_in(actions)
        keys = self._next_keys()
        if self.autoreset_mode == AutoresetMode.SAME_STEP:
            obs, self._state, reward, terminated, truncated, info = self._step_fn(keys, self._state, action)
            info = dict(info)
            final_obs = info.pop("final_obs")
            out_info = _vector_info(info, self.num_envs)
            done = (terminated | truncated).cpu().numpy()
            if done.any():
                finals = np.full(self.num_envs, None, dtype=object)
                final_np = self._obs_out(final_obs)
                for i in np.flatnonzero(done):
                    finals[i] = final_np[i]
                out_info["final_obs"], out_info["_final_obs"] = finals, done
                out_info["final_info"], out_info["_final_info"] = {}, done
        else:
            # NEXT_STEP: the raw step for envs mid-episode, a reset for those that ended last call.
            obs, state, reward, terminated, truncated, info = self._step_env_fn(keys, self._state, action)
            reset_obs, reset_state = self._reset_fn(self._next_keys())
            restart = self._needs_reset
            self._state = _where_tree(restart, reset_state, state)
            obs = _where_tree(restart, reset_obs, obs)
            reward = torch.where(restart, torch.zeros_like(reward), reward)
            terminated = terminated & ~restart
            truncated = truncated & ~restart
            self._needs_reset = terminated | truncated
            out_info = _vector_info(info, self.num_envs, mask=~restart)
        return (
            self._obs_out(obs),
            reward.detach().cpu().numpy().astype(np.float64),
            terminated.cpu().numpy(),
            truncated.cpu().numpy(),
            out_info,
        )

    def close_extras(self, **kwargs: Any) -> None:
        self._state = None


def _vector_info(info: dict[str, Any], num_envs: int, mask: torch.Tensor | None = None) -> dict[str, Any]:
    """funrl's batched info tensors in gymnasium's vector layout: ``info[k]`` and mask ``info["_k"]``."""
    out: dict[str, Any] = {}
    valid = np.ones(num_envs, dtype=bool) if mask is None else mask.cpu().numpy()
    for name, value in info.items():
        if isinstance(value, torch.Tensor) and value.dim() >= 1 and value.shape[0] == num_envs:
            out[name] = value.detach().cpu().numpy()
            out["_" + name] = valid.copy()
    return out


def to_gymnasium(
    env_id_or_env: str | Environment,
    num_envs: int,
    device: str | torch.device = "cpu",
    seed: int = 0,
    params: Any = None,
    autoreset_mode: AutoresetMode = AutoresetMode.NEXT_STEP,
    compile: bool = False,
    **make_kwargs: Any,
) -> FunrlVectorEnv:
    """A ``gymnasium.vector.VectorEnv`` of ``num_envs`` copies of a funrl env (id or instance).

    ``params`` defaults to the env's default params (or ``make(id, **make_kwargs)``'s);
    ``compile=True`` compiles the batched step with ``torch.compile``.
    """
    env, params = resolve_env(env_id_or_env, params, make_kwargs)
    check_seed(seed)
    return FunrlVectorEnv(env, params, num_envs, device, seed, autoreset_mode, compile)


def to_gymnasium_env(
    env_id_or_env: str | Environment,
    params: Any = None,
    seed: int = 0,
    device: str | torch.device = "cpu",
    **make_kwargs: Any,
) -> FunrlEnv:
    """One copy of a funrl env (id or instance) as a single ``gymnasium.Env``.

    ``params`` defaults to the env's default params (or ``make(id, **make_kwargs)``'s); ``seed``
    seeds the first ``reset()`` that is given none. Passes gymnasium's and SB3's ``check_env``::

        env = funrl.envs.to_gymnasium_env("CartPole-v1")
        obs, info = env.reset(seed=0)
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
    """
    env, params = resolve_env(env_id_or_env, params, make_kwargs)
    check_seed(seed)
    return FunrlEnv(env, params, seed, device)


def resolve_env(env_id_or_env: Any, params: Any, make_kwargs: dict[str, Any]) -> tuple[Environment, Any]:
    """``(env, params)`` from an id (made with ``make_kwargs``) or an instance; ``params`` wins."""
    if isinstance(env_id_or_env, str):
        env, made_params = make(env_id_or_env, **make_kwargs)
    elif isinstance(env_id_or_env, Environment):
        if make_kwargs:
            raise TypeError(
                f"make_kwargs: only for an env id, got {sorted(make_kwargs)} with an env instance"
            )
        env, made_params = env_id_or_env, env_id_or_env.default_params
    else:
        raise TypeError(
            f"env_id_or_env: expected an env id or a funrl Environment, got {type(env_id_or_env).__name__}"
        )
    return env, made_params if params is None else params


def check_seed(seed: Any, name: str = "seed") -> int:
    """``seed`` if it is an int (not a bool), else a ``TypeError`` naming ``name``."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise TypeError(f"{name}: expected an int, got {type(seed).__name__}")
    return int(seed)


# ------------------------------------------------------------------------------------------------
# gymnasium -> funrl
# ------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class HostParams(EnvParams):
    """No options: the time limit and physics live inside the gymnasium env.

    ``max_steps_in_episode`` only reports the gymnasium spec's ``max_episode_steps`` (0 when the
    env declares none), so that loops bounded by it (evaluation) know how long an episode can be.
    """

    max_steps_in_episode: int = 0


class HostState(NamedTuple):
    """An opaque handle on the host env: ``version`` counts its calls, so a stale handle is caught."""

    version: torch.Tensor  # int64 scalar


class HostEnvironment(Environment):
    """A gymnasium vector env behind funrl's ``reset``/``step`` signature (eager, host only).

    Batched: observations, rewards and flags carry a leading ``num_envs`` dimension, like
    ``funrl.envs.vmap``'s view, so funrl's wrappers apply unchanged. ``step`` follows funrl's
    auto-reset convention (SAME_STEP: the ending step returns the new episode's first
    observation; the last one is in ``info["final_obs"]``, for every env, equal to ``obs`` where
    no episode ended).

    Not pure: the gymnasium envs are stateful objects. ``state`` is only a handle; passing an
    older handle (e.g. stepping the same state twice) raises a ValueError instead of silently
    returning a different result. Keys: ``reset(key)`` seeds the gymnasium envs with a 32-bit
    integer drawn from ``key`` (``random.bits``), so the same key gives the same episode starts;
    ``step`` ignores its key (the host env draws from the generators seeded at reset).
    """

    def __init__(self, vector_env: gym.vector.VectorEnv, device: str | torch.device = "cpu") -> None:
        mode = vector_env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        if mode != AutoresetMode.SAME_STEP:
            raise ValueError(
                f"vector_env: expected autoreset_mode SAME_STEP (funrl's convention), got {mode}"
            )
        self.vector_env = vector_env
        self.num_envs = vector_env.num_envs
        self.device = torch.device(device)
        self._observation_space = space_from_gymnasium(vector_env.single_observation_space)
        self._action_space = space_from_gymnasium(vector_env.single_action_space)
        self._version = 0

    @property
    def name(self) -> str:
        spec = getattr(self.vector_env, "spec", None)
        return f"HostEnvironment({getattr(spec, 'id', type(self.vector_env).__name__)})"

    @property
    def default_params(self) -> HostParams:
        return HostParams(max_steps_in_episode=_max_episode_steps(self.vector_env))

    def observation_space(self, params: Any = None) -> Space:
        return self._observation_space

    def action_space(self, params: Any = None) -> Space:
        return self._action_space

    def _refuse_traced(self) -> None:
        if control.is_traced():
            raise RuntimeError(
                "from_gymnasium: a host gymnasium env cannot run under torch.compile or a torch.func "
                f"transform (vmap, grad); it is already batched ({self.num_envs} envs): call it eagerly"
            )

    def _check_handle(self, state: Any) -> None:
        if not isinstance(state, HostState):
            raise TypeError(f"state: expected the HostState from reset/step, got {type(state).__name__}")
        if int(state.version) != self._version:
            raise ValueError(
                f"state: stale handle (version {int(state.version)}, the host env is at {self._version}); "
                "a host env cannot go back: use the state returned by the latest call"
            )

    def _handle(self) -> HostState:
        self._version += 1
        return HostState(torch.tensor(self._version, dtype=torch.int64))

    def _tensor(self, values: Any, dtype: torch.dtype) -> torch.Tensor:
        return torch.as_tensor(np.asarray(values), device=self.device).to(dtype)

    def _obs(self, obs: Any) -> torch.Tensor:
        return self._tensor(obs, self._observation_space.dtype)

    def reset_env(self, key: torch.Tensor, params: Any) -> tuple[torch.Tensor, HostState]:
        self._refuse_traced()
        seed = int(random.bits(key, ()))
        obs, _ = self.vector_env.reset(seed=seed)
        return self._obs(obs), self._handle()

    def _step(self, state: HostState, action: torch.Tensor):
        self._check_handle(state)
        space = self._action_space
        expected = (self.num_envs, *space.shape)
        if not isinstance(action, torch.Tensor):
            raise TypeError(f"action: expected a torch.Tensor, got {type(action).__name__}")
        if tuple(action.shape) != expected:
            raise ValueError(
                f"action: expected shape {list(expected)} (num_envs first), got {list(action.shape)}"
            )
        if isinstance(space, Discrete) and (action.dtype.is_floating_point or action.dtype == torch.bool):
            raise TypeError(f"action: expected an integer tensor for {space}, got dtype {action.dtype}")
        obs, reward, terminated, truncated, info = self.vector_env.step(action.detach().cpu().numpy())
        obs_t = self._obs(obs)
        final_obs = obs_t.clone()
        if "_final_obs" in info:
            for i in np.flatnonzero(info["_final_obs"]):
                final_obs[i] = self._obs(info["final_obs"][i])
        out_info = {"final_obs": final_obs}
        return (
            obs_t,
            self._handle(),
            self._tensor(reward, torch.float32),
            self._tensor(terminated, torch.bool),
            self._tensor(truncated, torch.bool),
            out_info,
        )

    def draw_step(self, key: torch.Tensor, params: Any = None) -> torch.Tensor:
        """Nothing to draw ahead: the host envs reset themselves from their own generators."""
        return key

    def step_with(self, draw: Any, state: Any, action: torch.Tensor, params: Any = None):
        self._refuse_traced()
        return self._step(state, action)

    def step_env(self, key: torch.Tensor, state: Any, action: torch.Tensor, params: Any):
        raise NotImplementedError(
            "from_gymnasium: the host env auto-resets inside gymnasium; use step (there is no raw step_env)"
        )

    def close(self) -> None:
        self.vector_env.close()


def _max_episode_steps(vector_env: gym.vector.VectorEnv) -> int:
    """The time limit of the spec of ``vector_env`` (or of its first sub-env), 0 if none is declared."""
    spec = getattr(vector_env, "spec", None)
    if spec is None and getattr(vector_env, "envs", None):
        spec = getattr(vector_env.envs[0], "spec", None)
    limit = getattr(spec, "max_episode_steps", None)
    return int(limit) if limit else 0


def host_env_of(env: Any) -> HostEnvironment | None:
    """The :class:`HostEnvironment` that ``env`` is or wraps (through ``.env`` links), else None.

    Such an env runs only eagerly, one set of ``num_envs`` host envs: callers that would compile
    or ``vmap`` it (the agents' training loop) check this first and say so.
    """
    while env is not None:
        if isinstance(env, HostEnvironment):
            return env
        env = getattr(env, "env", None)
    return None


def from_gymnasium(
    id_or_env: str | Callable[[], gym.Env] | gym.vector.VectorEnv,
    num_envs: int = 1,
    device: str | torch.device = "cpu",
    **make_kwargs: Any,
) -> tuple[HostEnvironment, HostParams]:
    """Any gymnasium env behind funrl's signature: ``(env, params)`` as ``funrl.envs.make`` returns.

    ``id_or_env``: a registered id (made with ``gymnasium.make_vec(id, num_envs,
    vectorization_mode="sync", **make_kwargs)``), a zero-argument factory of a ``gymnasium.Env``,
    or a ``VectorEnv`` built with ``autoreset_mode=SAME_STEP``.
    """
    num_envs = _check_num_envs(num_envs)
    if isinstance(id_or_env, gym.vector.VectorEnv):
        if id_or_env.num_envs != num_envs:
            raise ValueError(
                f"num_envs: the vector env has {id_or_env.num_envs} envs, got num_envs={num_envs}"
            )
        vector_env = id_or_env
    elif isinstance(id_or_env, str):
        vector_env = gym.make_vec(
            id_or_env,
            num_envs=num_envs,
            vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
            **make_kwargs,
        )
    elif callable(id_or_env) and not isinstance(id_or_env, gym.Env):
        vector_env = gym.vector.SyncVectorEnv(
            [id_or_env] * num_envs, autoreset_mode=AutoresetMode.SAME_STEP, **make_kwargs
        )
    else:
        raise TypeError(
            "id_or_env: expected a gymnasium id, a zero-argument env factory or a VectorEnv, "
            f"got {type(id_or_env).__name__}"
        )
    env = HostEnvironment(vector_env, device)
    return env, env.default_params
