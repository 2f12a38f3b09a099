"""A funrl environment as a Stable-Baselines3 ``VecEnv``: ``to_sb3_vec_env(env_id_or_env, num_envs)``.

SB3 trains on it as on ``DummyVecEnv``, but the ``num_envs`` copies step in one ``vmap``-ed call
of the pure env instead of a Python loop over env objects::

    from stable_baselines3 import PPO
    vec_env = funrl.envs.to_sb3_vec_env("CartPole-v1", num_envs=8, seed=0)
    PPO("MlpPolicy", vec_env).learn(100_000)

It behaves step for step like ``DummyVecEnv`` over :func:`funrl.envs.to_gymnasium_env` copies
seeded ``seed, seed + 1, ...`` (the tests check it): SB3's auto-reset, where the step that ends an
episode returns the next episode's first observation, keeps the last one in
``infos[i]["terminal_observation"]`` and sets ``infos[i]["TimeLimit.truncated"]`` when the time
limit (not a terminal state) ended it; rewards are float32, dones bool. Copy ``i`` draws its keys
as the single env does: its ``n``-th reset or step uses ``random.fold_in(random.key(seed + i), n)``
(or the seeds given to ``seed()`` before a ``reset()``).

``compile=True`` compiles the whole batched transition (step, auto-reset, key derivation) into
one graph with :func:`funrl.control.compile`: the first step pays the compile, later ones skip
the per-op overhead of eager torch that dominates small envs such as CartPole.

The copies share one funrl env and its params, so ``get_attr``/``env_method`` read the adapter's
own attributes (``env``, ``params``, ``render_mode``...) for every index and ``set_attr`` sets one
for all copies only. Needs ``stable-baselines3`` (in funrl's ``dev`` extra); funrl itself imports
without it, and ``funrl.envs.to_sb3_vec_env`` raises an ``ImportError`` saying so.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

try:
    from stable_baselines3.common.vec_env import VecEnv
except ImportError as err:
    raise ImportError(
        "funrl.envs.to_sb3_vec_env needs stable-baselines3, which funrl itself does not install: "
        "pip install stable-baselines3"
    ) from err

from funrl import control, random
from funrl import tree as ftree
from funrl.envs.checker import validate_action
from funrl.envs.core import Environment, _where_tree
from funrl.envs.gymnasium_bridge import (
    _TORCH_TO_NUMPY,
    _check_num_envs,
    action_to_torch,
    check_no_options,
    check_seed,
    info_to_numpy,
    resolve_env,
    space_to_gymnasium,
)

__all__ = ["FunrlSB3VecEnv", "to_sb3_vec_env"]


_fold_in_each = torch.func.vmap(random.fold_in)  # (seed keys [N, 2], call counts [N]) -> keys [N, 2]


class FunrlSB3VecEnv(VecEnv):
    """``num_envs`` copies of a funrl environment as an SB3 ``VecEnv`` (see the module docstring)."""

    render_mode = None

    def __init__(
        self,
        env: Environment,
        params: Any,
        num_envs: int,
        seed: int = 0,
        device: str | torch.device = "cpu",
        compile: bool = False,
    ) -> None:
        self.env, self.params = env, params
        self.device = torch.device(device)
        num_envs = _check_num_envs(num_envs)
        super().__init__(
            num_envs,
            space_to_gymnasium(env.observation_space(params)),
            space_to_gymnasium(env.action_space(params)),
        )
        self._action_space = env.action_space(params)
        self._obs_dtype = _TORCH_TO_NUMPY[env.observation_space(params).dtype]
        self._reset_fn = torch.func.vmap(lambda k: env.reset(k, params))
        self._step_env_fn = torch.func.vmap(lambda k, s, a: env.step_env(k, s, a, params))
        # Copy i is seeded seed + i, as make_vec_env(seed=seed) seeds its copies.
        self._seed_keys = random.key(torch.arange(num_envs) + check_seed(seed)).to(self.device)
        self._calls = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        self._transition = (
            control.compile(self._transition_fn, device=self.device) if compile else self._transition_fn
        )
        self._state: Any = None
        self._actions: torch.Tensor | None = None

    def _obs_out(self, obs: torch.Tensor) -> np.ndarray:
        return obs.detach().cpu().numpy().astype(self._obs_dtype, copy=False)

    def reset(self) -> np.ndarray:
        for i, seed in enumerate(self._seeds):
            if seed is not None:
                self._seed_keys[i] = random.key(check_seed(seed, f"seeds[{i}]")).to(self.device)
                self._calls[i] = 0
        for options in self._options:
            check_no_options(options)
        obs, state = self._reset_fn(_fold_in_each(self._seed_keys, self._calls))
        # A compiled transition returns contiguous leaves; reset's match them, so it compiles once.
        self._state = ftree.map(torch.Tensor.contiguous, state)
        self._calls = self._calls + 1
        self._reset_seeds()
        self._reset_options()
        self.reset_infos = [{} for _ in range(self.num_envs)]
        return self._obs_out(obs)

    def step_async(self, actions: np.ndarray) -> None:
        if self._state is None:
            raise RuntimeError("step: call reset() before step()")
        action = action_to_torch(actions, self._action_space.dtype, self.device)
        expected = (self.num_envs, *self._action_space.shape)
        if tuple(action.shape) != expected:
            raise ValueError(
                f"actions: expected shape {expected} (num_envs first), got {tuple(action.shape)}"
            )
        # One check of the whole batch (bounds broadcast over it); a failure names the first bad copy.
        if not bool(self._action_space.contains(action)):
            for i in range(self.num_envs):
                validate_action(self.env, action[i], self.params, name=f"actions[{i}]")
        self._actions = action

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        if self._actions is None:
            raise RuntimeError("step_wait: call step_async(actions) first")
        obs, next_obs, self._state, reward, terminated, truncated, info, self._calls = self._transition(
            self._seed_keys, self._calls, self._state, self._actions
        )
        self._actions = None
        done = terminated | truncated
        last_obs = self._obs_out(obs)
        done_np = done.cpu().numpy()
        time_limit_np = (truncated & ~terminated).cpu().numpy()
        info_np = info_to_numpy(info)
        infos: list[dict[str, Any]] = []
        for i in range(self.num_envs):
            copy_info = {name: _item(value, i) for name, value in info_np.items()}
            copy_info["TimeLimit.truncated"] = bool(time_limit_np[i])
            if done_np[i]:
                copy_info["terminal_observation"] = last_obs[i]
                self.reset_infos[i] = {}
            infos.append(copy_info)
        return self._obs_out(next_obs), reward.detach().cpu().numpy().astype(np.float32), done_np, infos

    def _transition_fn(self, seed_keys: torch.Tensor, calls: torch.Tensor, state: Any, action: torch.Tensor):
        """One step of every copy and, where its episode ended, its reset (SB3's auto-reset), with
        each copy's next keys; pure, so ``compile=True`` makes it one graph."""
        obs, state, reward, terminated, truncated, info = self._step_env_fn(
            _fold_in_each(seed_keys, calls), state, action
        )
        done = terminated | truncated
        reset_obs, reset_state = self._reset_fn(_fold_in_each(seed_keys, calls + 1))
        next_obs = _where_tree(done, reset_obs, obs)
        state = _where_tree(done, reset_state, state)
        return obs, next_obs, state, reward, terminated, truncated, info, calls + 1 + done.to(calls.dtype)

    def close(self) -> None:
        self._state = None

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        return [getattr(self, attr_name) for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        if sorted(self._get_indices(indices)) != list(range(self.num_envs)):
            raise ValueError(
                f"indices: the copies share one funrl env, so set_attr sets {attr_name!r} for all of them; "
                f"got indices={indices!r}"
            )
        setattr(self, attr_name, value)

    def env_method(
        self, method_name: str, *method_args: Any, indices: Any = None, **method_kwargs: Any
    ) -> list[Any]:
        return [getattr(self, method_name)(*method_args, **method_kwargs) for _ in self._get_indices(indices)]

    def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
        return [False for _ in self._get_indices(indices)]


def _item(value: Any, i: int) -> Any:
    """Copy ``i``'s entry of a batched numpy info value (0-d entries as Python scalars)."""
    if isinstance(value, np.ndarray):
        entry = value[i]
        return entry.item() if np.ndim(entry) == 0 else entry
    return value


def to_sb3_vec_env(
    env_id_or_env: str | Environment,
    num_envs: int,
    params: Any = None,
    seed: int = 0,
    device: str | torch.device = "cpu",
    compile: bool = False,
    **make_kwargs: Any,
) -> FunrlSB3VecEnv:
    """An SB3 ``VecEnv`` of ``num_envs`` copies of a funrl env (id or instance), copy ``i`` seeded
    ``seed + i``; ``params`` defaults to the env's default params (or ``make(id, **make_kwargs)``'s);
    ``compile=True`` compiles the batched transition (see the module docstring)."""
    env, params = resolve_env(env_id_or_env, params, make_kwargs)
    return FunrlSB3VecEnv(env, params, num_envs, seed, device, compile)
