"""``check(env, params)``: validate a whole pure environment, as gymnasium's ``check_env`` does.

Eager-mode debugging tools; they synchronise with the host freely. ``check`` runs random play and
raises at the first broken promise of the interface (``funrl.envs.core``):

- spaces: ``observation_space``/``action_space`` are ``Space`` objects with shapes and dtypes;
- signatures: ``reset -> (obs, state)``, ``step``/``step_env -> (obs, state, reward, terminated,
  truncated, info)``; reward a float scalar, flags bool scalars, ``info`` a dict with
  ``final_obs`` (from ``step``);
- observations: shape, dtype and bounds of the observation space, on reset, step and final_obs;
- purity: the same inputs give the same outputs, the input state is left untouched, and the state
  keeps its structure, shapes and dtypes;
- auto-reset: ``info["final_obs"]`` is ``step_env``'s observation, and where the episode ended the
  returned obs/state are ``reset_env``'s (with the keys ``step_keys`` assigns);
- batching: ``vmap(step)(keys)[i] == step(keys[i])`` and the same for ``reset``; where the env
  declares ``batch_polymorphic``, ``step_with`` called on a batch equals ``vmap(step_with)`` over
  steps that end and reset episodes.

``validate_action`` is the range check that compiled code cannot make: call it in eager code (or
use it in a validating wrapper) to turn an out-of-range action into a clear ``ValueError``.
"""

from __future__ import annotations

from typing import Any

import torch

from funrl import random
from funrl import tree as ftree
from funrl.envs.core import Box, Discrete, Space, check_action_static

__all__ = ["check", "validate_action"]


def validate_action(env: Any, action: torch.Tensor, params: Any = None, name: str = "action") -> None:
    """Raise a ``TypeError``/``ValueError`` unless ``action`` (one env's) lies in the action space."""
    params = env.default_params if params is None else params
    space = env.action_space(params)
    check_action_static(action, space, name)
    if isinstance(space, Discrete):
        if not bool(((action >= 0) & (action < space.n)).all()):
            raise ValueError(f"{name}: expected values in [0, {space.n}), got {action.tolist()}")
    elif isinstance(space, Box):
        if action.dtype.is_floating_point and not bool(torch.isfinite(action).all()):
            raise ValueError(f"{name}: expected finite values, got {action.tolist()}")
        if not bool(space.contains(action)):
            raise ValueError(f"{name}: expected values in [{space.low}, {space.high}], got {action.tolist()}")


def _check_space(space: Any, name: str) -> None:
    if not isinstance(space, Space):
        raise TypeError(f"{name}: expected a funrl.envs.Space, got {type(space).__name__}")
    if not isinstance(space.shape, tuple) or not all(isinstance(s, int) for s in space.shape):
        raise TypeError(f"{name}.shape: expected a tuple of ints, got {space.shape!r}")
    if not isinstance(space.dtype, torch.dtype):
        raise TypeError(f"{name}.dtype: expected a torch.dtype, got {space.dtype!r}")


def _check_obs(obs: Any, space: Space, where: str) -> None:
    if not isinstance(obs, torch.Tensor):
        raise TypeError(f"{where}: expected a torch.Tensor observation, got {type(obs).__name__}")
    if tuple(obs.shape) != tuple(space.shape):
        raise ValueError(f"{where}: expected shape {list(space.shape)}, got {list(obs.shape)}")
    if obs.dtype != space.dtype:
        raise TypeError(f"{where}: expected dtype {space.dtype}, got {obs.dtype}")
    if obs.dtype.is_floating_point and not bool(torch.isfinite(obs).all()):
        raise ValueError(f"{where}: observation holds NaN or inf: {obs.tolist()}")
    if not bool(space.contains(obs)):
        raise ValueError(f"{where}: observation outside the observation space {space}: {obs.tolist()}")


def _check_scalar(x: Any, kind: str, where: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{where}: expected a tensor, got {type(x).__name__}")
    if x.shape != ():
        raise ValueError(f"{where}: expected a scalar (shape []), got shape {list(x.shape)}")
    if kind == "float" and not x.dtype.is_floating_point:
        raise TypeError(f"{where}: expected a floating dtype, got {x.dtype}")
    if kind == "bool" and x.dtype != torch.bool:
        raise TypeError(f"{where}: expected dtype torch.bool, got {x.dtype}")


def _check_state_like(new: Any, old: Any, where: str) -> None:
    try:
        ftree.check_same_structure(new, old, where)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{where}: the state changed structure: {err}") from None
    for a, b in zip(ftree.leaves(new), ftree.leaves(old), strict=True):
        if isinstance(a, torch.Tensor) and (a.shape != b.shape or a.dtype != b.dtype):
            raise ValueError(
                f"{where}: a state leaf changed from {b.dtype}{list(b.shape)} to {a.dtype}{list(a.shape)}"
            )


def _unpack(out: Any, n: int, where: str) -> tuple:
    if not isinstance(out, tuple) or len(out) != n:
        got = f"a {len(out)}-tuple" if isinstance(out, tuple) else type(out).__name__
        raise TypeError(f"{where}: expected a {n}-tuple, got {got}")
    return out


def _step_keys(env: Any, key: torch.Tensor, params: Any) -> tuple[torch.Tensor, torch.Tensor]:
    if hasattr(env, "step_keys"):
        return env.step_keys(key, params)
    key_step, key_reset = random.split(key)
    return key_step, key_reset


def check(env: Any, params: Any = None, seed: int = 0, num_steps: int = 300, check_vmap: bool = True) -> None:
    """Validate ``env`` under ``params`` by random play; raise a ``TypeError``/``ValueError`` naming
    the first broken promise (see the module docstring), or return ``None``.

    Args:
        env: the environment (single-env functions).
        params: its params (``None`` for the defaults).
        seed: seed of the keys and the random actions.
        num_steps: steps of random play (episodes end and auto-reset on the way).
        check_vmap: also check that ``vmap`` over keys equals a loop.
    """
    params = env.default_params if params is None else params
    obs_space = env.observation_space(params)
    act_space = env.action_space(params)
    _check_space(obs_space, "observation_space")
    _check_space(act_space, "action_space")
    key = random.key(seed)

    obs, state = _unpack(env.reset(key, params), 2, "reset")
    _check_obs(obs, obs_space, "reset obs")
    if not ftree.tree_equal((obs, state), env.reset(key.clone(), params)):
        raise ValueError("reset: not pure: the same key gave different observations or states")

    for t in range(num_steps):
        k = random.fold_in(key, t)
        action = act_space.sample(random.fold_in(k, 1))
        validate_action(env, action, params, "action_space.sample()")
        before = ftree.map(torch.clone, state)
        # The raw transition first: step's auto-reset would trip over its bad types less clearly.
        key_step, key_reset = _step_keys(env, k, params)
        raw = _unpack(env.step_env(key_step, state, action, params), 6, "step_env")
        _check_obs(raw[0], obs_space, f"step_env {t}: obs")
        _check_scalar(raw[2], "float", f"step_env {t}: reward")
        _check_scalar(raw[3], "bool", f"step_env {t}: terminated")
        _check_scalar(raw[4], "bool", f"step_env {t}: truncated")
        out = _unpack(env.step(k, state, action, params), 6, "step")
        new_obs, new_state, reward, terminated, truncated, info = out
        where = f"step {t}"
        _check_obs(new_obs, obs_space, f"{where}: obs")
        _check_scalar(reward, "float", f"{where}: reward")
        _check_scalar(terminated, "bool", f"{where}: terminated")
        _check_scalar(truncated, "bool", f"{where}: truncated")
        if not isinstance(info, dict) or "final_obs" not in info:
            raise TypeError(f"{where}: info: expected a dict with 'final_obs', got {info!r}")
        _check_obs(info["final_obs"], obs_space, f'{where}: info["final_obs"]')
        _check_state_like(new_state, state, f"{where}: state")
        if not ftree.tree_equal(state, before):
            raise ValueError(f"{where}: step modified its input state in place")
        if not ftree.tree_equal(out, env.step(k.clone(), state, action.clone(), params)):
            raise ValueError(f"{where}: step is not pure: the same inputs gave different outputs")

        if not ftree.tree_equal(
            (info["final_obs"], reward, terminated, truncated), tuple(raw[0:1] + raw[2:5])
        ):
            raise ValueError(f"{where}: info['final_obs'], reward or flags differ from step_env's")
        if bool(terminated | truncated):
            expected = env.reset(key_reset, params)
            if not ftree.tree_equal((new_obs, new_state), expected):
                raise ValueError(f"{where}: the episode ended but obs/state are not reset_env's")
        elif not ftree.tree_equal((new_obs, new_state), (raw[0], raw[1])):
            raise ValueError(f"{where}: the episode goes on but obs/state differ from step_env's")
        obs, state = new_obs, new_state

    if check_vmap:
        keys = random.split(random.fold_in(key, num_steps), 3)
        try:
            batched = torch.func.vmap(env.reset, in_dims=(0, None))(keys, params)
        except Exception as err:  # any failure to batch is the finding; say which call failed
            raise ValueError(f"vmap(reset) failed (host syncs or Python branches on values?): {err}") from err
        for i in range(3):
            if not ftree.tree_equal(ftree.index(batched, i), env.reset(keys[i], params)):
                raise ValueError("vmap(reset)(keys)[i] differs from reset(keys[i])")
        states = batched[1]
        actions = torch.stack([act_space.sample(random.fold_in(k, 1)) for k in keys])
        try:
            out = torch.func.vmap(env.step, in_dims=(0, 0, 0, None))(keys, states, actions, params)
        except Exception as err:
            raise ValueError(f"vmap(step) failed (host syncs or Python branches on values?): {err}") from err
        for i in range(3):
            single = env.step(keys[i], ftree.index(states, i), actions[i], params)
            if not ftree.tree_equal(ftree.index(out, i), single):
                raise ValueError("vmap(step)(keys)[i] differs from step(keys[i])")
        if getattr(env, "batch_polymorphic", False):
            _check_step_on_batch(env, params, keys, states, num_steps)


def _check_step_on_batch(env: Any, params: Any, keys: torch.Tensor, states: Any, num_steps: int) -> None:
    """``step_with`` on the batch as it is equals ``vmap(step_with)``, step after step."""
    act_space = env.action_space(params)
    vmapped = torch.func.vmap(env.step_with, in_dims=(0, 0, 0, None))
    for t in range(num_steps):
        step_keys = torch.stack([random.fold_in(k, t) for k in keys])
        draws = torch.func.vmap(env.draw_step, in_dims=(0, None))(step_keys, params)
        actions = torch.stack([act_space.sample(random.fold_in(k, 1)) for k in step_keys])
        expected = vmapped(draws, states, actions, params)
        try:
            out = env.step_with(draws, states, actions, params)
        except Exception as err:
            raise ValueError(
                f"step_with on a batch failed (the env declares batch_polymorphic): {err}"
            ) from err
        if not ftree.tree_equal(out, expected):
            raise ValueError(
                f"step {t}: step_with on a batch differs from vmap(step_with) "
                "(the env declares batch_polymorphic)"
            )
        states = expected[1]
