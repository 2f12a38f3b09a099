"""MuJoCo locomotion as pure batched functions: gymnasium's v5 environments on a threaded op.

::

    env, params = funrl.envs.make("HalfCheetah-v5", ctrl_cost_weight=0.05)
    obs, state = env.reset(key, params)
    obs, state, reward, terminated, truncated, info = env.step(key, state, action, params)
    batched = funrl.envs.vmap(env, 256)      # one physics call per step for all 256 envs

Each environment follows gymnasium's ``*_v5.py`` exactly (the XML assets of the installed
gymnasium, frame skip, observation layout, reward terms and weights in ``info``, healthy ranges,
reset noise, time limits); its keyword options are fields of its params (``xml_file`` is
refused). The state carries the whole simulator state as float64 tensors
(``funrl.envs.mujoco.base.MujocoState``); observations and rewards are float32.

The physics runs in C through ``torch.ops.funrl.mujoco_step``, a custom operator that steps a
batch of environments on a thread pool (``funrl.envs.mujoco.physics``): one opaque node under
``torch.compile``, batched by ``vmap``, no gradient. ``set_num_threads(n)`` sets its threads
(results never depend on it). Design notes: ``docs/mujoco.md``.
"""

from funrl.envs.mujoco.ant import Ant, AntParams
from funrl.envs.mujoco.base import MujocoEnv, MujocoParams, MujocoState
from funrl.envs.mujoco.half_cheetah import HalfCheetah, HalfCheetahParams
from funrl.envs.mujoco.hopper import Hopper, HopperParams
from funrl.envs.mujoco.humanoid import Humanoid, HumanoidParams
from funrl.envs.mujoco.inverted_double_pendulum import InvertedDoublePendulum, InvertedDoublePendulumParams
from funrl.envs.mujoco.inverted_pendulum import InvertedPendulum, InvertedPendulumParams
from funrl.envs.mujoco.physics import get_num_threads, set_num_threads
from funrl.envs.mujoco.pusher import Pusher, PusherParams
from funrl.envs.mujoco.reacher import Reacher, ReacherParams
from funrl.envs.mujoco.swimmer import Swimmer, SwimmerParams
from funrl.envs.mujoco.walker2d import Walker2d, Walker2dParams

__all__ = [
    "MujocoEnv",
    "MujocoParams",
    "MujocoState",
    "Ant",
    "AntParams",
    "HalfCheetah",
    "HalfCheetahParams",
    "Hopper",
    "HopperParams",
    "Humanoid",
    "HumanoidParams",
    "InvertedDoublePendulum",
    "InvertedDoublePendulumParams",
    "InvertedPendulum",
    "InvertedPendulumParams",
    "Pusher",
    "PusherParams",
    "Reacher",
    "ReacherParams",
    "Swimmer",
    "SwimmerParams",
    "Walker2d",
    "Walker2dParams",
    "get_num_threads",
    "set_num_threads",
]
