"""RGB frames of MuJoCo environment states, and a helper that writes them as a GIF or MP4.

::

    env, params = funrl.envs.make("HalfCheetah-v5")
    obs, state = env.reset(key, params)
    frame = funrl.envs.render(env, state, params)                 # uint8 [480, 480, 3]
    frames = funrl.envs.render(env, states, params, width=320, height=240)  # states [T, ...]: [T, 240, 320, 3]
    funrl.envs.write_video(frames, "cheetah.gif", fps=20)

A state with leading dimensions (a batch of environments, a trajectory stacked over time, both)
gives one frame per state, in the same order: every leading dimension of ``state.physics`` is kept
in front of ``[H, W, 3]``. ``env`` may be a MuJoCo environment, a wrapper around one or a
``funrl.envs.vmap`` of one; ``state`` may be a wrapper's or an agent's tree holding one
``MujocoState``. Rendering reads only the physics state (time, qpos, qvel), so it works on any
state the environment produced, eagerly, outside compiled code.

The camera is gymnasium's default camera of the same environment (its module's
``DEFAULT_CAMERA_CONFIG``: distance, elevation, look-at point), tracking the robot's root body (or
the body that configuration names) so that a running robot stays in view.

Frames come from ``mujoco.Renderer``, which needs an OpenGL backend: MuJoCo picks one from the
``MUJOCO_GL`` environment variable when ``mujoco`` is first imported -- ``egl`` (headless, GPU or
Mesa's EGL), ``osmesa`` (software) or ``glfw`` (a window system, the default). Where the backend
cannot create a context, :func:`render` raises an error that names the backend and how to choose
another; set the variable before anything imports ``mujoco`` (before ``import funrl``).
"""

from __future__ import annotations

import copy as copy_module
import importlib
import math
import os
from pathlib import Path
from typing import Any

import mujoco
import numpy as np
import optree
import torch

from funrl.envs.mujoco.base import MujocoEnv, MujocoState

__all__ = ["render", "write_video"]

VIDEO_SUFFIXES = (".gif", ".mp4")
FULLPHYSICS = mujoco.mjtState.mjSTATE_FULLPHYSICS


def gl_backend() -> str:
    """The OpenGL backend ``mujoco`` chose at import: ``MUJOCO_GL`` as it was then, or ``glfw``."""
    return os.environ.get("MUJOCO_GL", "").lower() or "glfw"


def _find_mujoco_env(env: Any) -> MujocoEnv:
    """``env`` itself, or the MuJoCo env inside a wrapper or a batched env (their ``.env``)."""
    inner = env
    while not isinstance(inner, MujocoEnv):
        inner = getattr(inner, "env", None)
        if inner is None:
            name = getattr(env, "name", type(env).__name__)
            raise TypeError(
                f"env: expected a MuJoCo environment (funrl.envs.mujoco.MujocoEnv, or a wrapper or "
                f"funrl.envs.vmap around one), got {name!r} ({type(env).__name__}); only MuJoCo "
                f"environments can be rendered"
            )
    return inner


def _find_physics(state: Any, env: MujocoEnv) -> torch.Tensor:
    """The ``physics`` tensor of the one ``MujocoState`` in ``state``'s tree, checked against ``env``."""
    found = [
        leaf
        for leaf in optree.tree_leaves(state, is_leaf=lambda x: isinstance(x, MujocoState), none_is_leaf=True)
        if isinstance(leaf, MujocoState)
    ]
    if len(found) != 1:
        raise TypeError(
            f"state: expected a tree holding one funrl.envs.mujoco.MujocoState (the state of {env.name}), "
            f"found {len(found)} in a {type(state).__name__}"
        )
    physics = found[0].physics
    size = 1 + env.nq + env.nv
    if not isinstance(physics, torch.Tensor) or physics.ndim < 1 or physics.shape[-1] != size:
        shape = tuple(physics.shape) if isinstance(physics, torch.Tensor) else type(physics).__name__
        raise ValueError(
            f"state: expected physics of shape [..., {size}] (time, qpos, qvel of {env.name}), got {shape}"
        )
    return physics


def _camera(env: MujocoEnv, model: mujoco.MjModel) -> mujoco.MjvCamera:
    """gymnasium's default camera of ``env``, tracking the root body (or the configured one)."""
    gym_module = importlib.import_module(f"gymnasium.envs.mujoco.{type(env).__module__.rsplit('.', 1)[1]}_v5")
    config = getattr(gym_module, "DEFAULT_CAMERA_CONFIG", {})
    camera = mujoco.MjvCamera()
    mujoco.mjv_defaultFreeCamera(model, camera)
    camera.type = mujoco.mjtCamera.mjCAMERA_TRACKING
    camera.trackbodyid = 1
    for name, value in config.items():
        if isinstance(value, np.ndarray):
            getattr(camera, name)[:] = value
        else:
            setattr(camera, name, value)
    return camera


def _renderer(model: mujoco.MjModel, width: int, height: int) -> mujoco.Renderer:
    try:
        return mujoco.Renderer(model, height=height, width=width)
    except Exception as err:  # each backend fails its own way (ImportError, AttributeError, FatalError, ...)
        backend = gl_backend()
        raise RuntimeError(
            f"render: mujoco.Renderer found no working OpenGL backend (MUJOCO_GL={backend!r}: "
            f"{type(err).__name__}: {err}). Set MUJOCO_GL=egl (headless, GPU or Mesa EGL) or "
            f"MUJOCO_GL=osmesa (software) before importing mujoco or funrl"
        ) from err


def _check_size(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: expected a positive int (pixels), got {value!r}")
    return value


def _copy_with_buffer(model: mujoco.MjModel, width: int, height: int) -> mujoco.MjModel:
    copy = copy_module.copy(model)
    copy.vis.global_.offwidth = max(width, copy.vis.global_.offwidth)
    copy.vis.global_.offheight = max(height, copy.vis.global_.offheight)
    return copy


def render(env: Any, state: Any, params: Any = None, *, width: int = 480, height: int = 480) -> torch.Tensor:
    """RGB frames of ``state``: uint8 ``[H, W, 3]`` for one state, ``[*batch, H, W, 3]`` for a
    state whose ``physics`` is ``[*batch, S]``, on ``state``'s device.

    ``params`` is accepted for the interface's symmetry (``env.step(key, state, action, params)``);
    MuJoCo's picture depends only on the physics state. The default size is gymnasium's 480x480.
    """
    del params  # the picture depends on the physics state only
    width, height = _check_size("width", width), _check_size("height", height)
    mujoco_env = _find_mujoco_env(env)
    physics = _find_physics(state, mujoco_env)
    model = mujoco_env.model
    if width > model.vis.global_.offwidth or height > model.vis.global_.offheight:
        # A copy with a larger offscreen buffer: the env's own model stays as it is.
        model = _copy_with_buffer(model, width, height)
    batch_shape = physics.shape[:-1]
    states = physics.detach().to(device="cpu", dtype=torch.float64).reshape(-1, physics.shape[-1]).numpy()
    frames = np.empty((len(states), height, width, 3), dtype=np.uint8)
    data = mujoco.MjData(model)
    camera = _camera(mujoco_env, model)
    renderer = _renderer(model, width, height)
    try:
        for i, physics_state in enumerate(states):
            mujoco.mj_setState(model, data, physics_state, FULLPHYSICS)
            mujoco.mj_forward(model, data)
            renderer.update_scene(data, camera)
            frames[i] = renderer.render()
    finally:
        renderer.close()
    return torch.from_numpy(frames).reshape(*batch_shape, height, width, 3).to(physics.device)


def write_video(frames: torch.Tensor | np.ndarray, path: str | os.PathLike, fps: float = 30.0) -> Path:
    """Writes ``frames`` (uint8 ``[T, H, W, 3]``) to ``path``: a looping GIF for ``.gif``, H.264 MP4
    for ``.mp4`` (needs ``imageio-ffmpeg``). Returns the path."""
    path = Path(path)
    if path.suffix.lower() not in VIDEO_SUFFIXES:
        raise ValueError(
            f"path: expected a file name ending in {' or '.join(VIDEO_SUFFIXES)}, got {str(path)!r}"
        )
    if isinstance(frames, torch.Tensor):
        frames = frames.detach().cpu().numpy()
    if (
        not isinstance(frames, np.ndarray)
        or frames.dtype != np.uint8
        or frames.ndim != 4
        or frames.shape[-1] != 3
    ):
        description = (
            f"{frames.dtype} array of shape {frames.shape}"
            if isinstance(frames, np.ndarray)
            else type(frames).__name__
        )
        raise ValueError(f"frames: expected uint8 frames of shape [T, H, W, 3], got {description}")
    if len(frames) == 0:
        raise ValueError("frames: expected at least one frame, got none")
    if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not math.isfinite(fps) or fps <= 0:
        raise ValueError(f"fps: expected a positive number of frames per second, got {fps!r}")
    import imageio.v3 as iio

    if path.suffix.lower() == ".gif":
        iio.imwrite(path, frames, extension=".gif", duration=1000.0 / fps, loop=0)
    else:
        try:
            import imageio_ffmpeg  # noqa: F401
        except ImportError as err:
            raise RuntimeError(
                f"path: writing {path.suffix} needs the imageio-ffmpeg package (pip install imageio-ffmpeg); "
                f"a .gif needs nothing more"
            ) from err
        iio.imwrite(path, frames, plugin="FFMPEG", fps=fps, codec="libx264", macro_block_size=1)
    return path
