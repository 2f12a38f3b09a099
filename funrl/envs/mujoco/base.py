"""The shared base of funrl's MuJoCo environments: state, params, physics calls, spaces.

A MuJoCo environment's state is the whole simulator state as tensors (:class:`MujocoState`):
``physics`` in ``mj_getState(..., mjSTATE_FULLPHYSICS)`` layout (time, qpos, qvel), float64; the
solver's warm start; the ``MjData`` fields the environment reads besides the state, as of the
last physics call (gymnasium reads some of them *before* a step, e.g. Ant's torso position);
and the episode step count. ``step_env`` is a pure function of these: one call of
``torch.ops.funrl.mujoco_step`` (see ``funrl.envs.mujoco.physics``) plus torch arithmetic.

Observations and rewards are float32 for the agents; the physics and every intermediate value
are float64, as gymnasium computes them, and are cast only at the boundary.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal, NamedTuple, TypeVar

import torch

from funrl import control, random
from funrl.envs import core
from funrl.envs.core import Box, Environment, EnvParams
from funrl.envs.mujoco import physics

__all__ = ["MujocoState", "MujocoParams", "MujocoEnv", "make_factory"]

TParams = TypeVar("TParams", bound="MujocoParams")


class MujocoState(NamedTuple):
    """``physics [S]`` FULLPHYSICS state, ``warmstart [nv]`` (``qacc_warmstart``), ``derived [D]``
    (the ``MjData`` fields named by the env's ``derived_fields``), all float64; ``time`` int32."""

    physics: torch.Tensor
    warmstart: torch.Tensor
    derived: torch.Tensor
    time: torch.Tensor


@dataclasses.dataclass(frozen=True)
class MujocoParams(EnvParams):
    """Options every MuJoCo env has: ``frame_skip`` (physics steps per env step) and the time limit."""

    frame_skip: int = 5
    max_steps_in_episode: int = 1000


class MujocoEnv(Environment[MujocoState, TParams]):
    """Base of the gymnasium v5 MuJoCo environments. Subclasses set ``env_id``, ``xml_file``,
    ``derived_fields`` (the ``MjData`` fields they read besides qpos/qvel), and define
    ``default_params``, ``reset_env``, ``step_env`` and ``observation_size``."""

    env_id: str = ""
    xml_file: str = ""
    derived_fields: tuple[str, ...] = ()
    # step_env reads the state through leading-dimension-agnostic indexing ([..., i], reductions
    # over the last dim) and steps a batch in one physics call; reset_env is per env (vmapped).
    batch_polymorphic = True

    def __init__(self) -> None:
        self.model_id = physics.model_id(self.xml_file, self.derived_fields)
        entry = physics.get_model(self.model_id)
        self.model = entry.model
        self.nq, self.nv, self.nu, self.nbody = self.model.nq, self.model.nv, self.model.nu, self.model.nbody
        self._field_slices: dict[str, tuple[int, int, tuple[int, ...]]] = {}
        offset = 0
        for name, shape in zip(entry.fields, entry.field_shapes, strict=True):
            size = math.prod(shape)
            self._field_slices[name] = (offset, offset + size, shape)
            offset += size
        # Copies of the model's constants: torch.compile traces through these methods, and numpy
        # arrays and mujoco calls there would break the graph. The vectors are tensors made here,
        # once: a compiled step takes them as inputs. Built inside the step they would be graph
        # constants, and inductor leaves a constant of more than 8 elements unbound in the loop
        # body of a compiled scan ("_torchinductor_pyobject_tensor_data_ptr: non-tensor input").
        self.qpos0 = tuple(self.model.qpos0.tolist())
        self.qpos0_tensor = torch.tensor(self.qpos0, dtype=torch.float64)
        self.timestep = float(self.model.opt.timestep)
        # A bound shared by every actuator (as in all ten models) stays one float, as gymnasium's
        # Box shows it: the bound tensors a step builds (ClipAction) then come from one number.
        self.ctrl_low = _shared_or_tuple(self.model.actuator_ctrlrange[:, 0].tolist())
        self.ctrl_high = _shared_or_tuple(self.model.actuator_ctrlrange[:, 1].tolist())
        self.body_mass = torch.tensor(self.model.body_mass.tolist(), dtype=torch.float64)
        self.body_ids = {self.model.body(i).name: i for i in range(self.model.nbody)}

    @property
    def name(self) -> str:
        return self.env_id

    # -- tensors of the model ------------------------------------------------------------------

    def init_qpos(self, device: torch.device | str | None = None) -> torch.Tensor:
        """gymnasium's ``init_qpos``: the model's ``qpos0``, float64."""
        return self.qpos0_tensor.to(device, copy=True)

    def init_qvel(self, device: torch.device | str | None = None) -> torch.Tensor:
        """gymnasium's ``init_qvel``: zeros, float64."""
        return torch.zeros(self.nv, dtype=torch.float64, device=device)

    def dt(self, params: TParams) -> float:
        """Seconds per env step: ``timestep * frame_skip``, gymnasium's ``dt``."""
        return self.timestep * params.frame_skip

    # -- reading the state ---------------------------------------------------------------------

    def qpos(self, state: MujocoState) -> torch.Tensor:
        return state.physics[..., 1 : 1 + self.nq]

    def qvel(self, state: MujocoState) -> torch.Tensor:
        return state.physics[..., 1 + self.nq : 1 + self.nq + self.nv]

    def field(self, state: MujocoState, name: str) -> torch.Tensor:
        """The ``MjData`` field ``name`` (one of ``derived_fields``) in its ``MjData`` shape,
        after the batch dimensions."""
        start, stop, shape = self._field_slices[name]
        return state.derived[..., start:stop].reshape(*state.derived.shape[:-1], *shape)

    def flat_field(self, state: MujocoState, name: str, first_row: int = 0) -> torch.Tensor:
        """The rows of field ``name`` from ``first_row`` on, flattened: ``[..., rows * cols]``
        (gymnasium's ``data.<name>[first_row:].flatten()``)."""
        start, stop, shape = self._field_slices[name]
        row = math.prod(shape[1:])
        return state.derived[..., start + first_row * row : stop]

    # -- physics -------------------------------------------------------------------------------

    def new_state(self, qpos: torch.Tensor, qvel: torch.Tensor) -> MujocoState:
        """gymnasium's ``reset`` + ``set_state(qpos, qvel)``: time 0, zero warm start, and the
        derived fields of a forward pass at that state (none computed if none are read)."""
        time0 = torch.zeros(1, dtype=torch.float64, device=qpos.device)
        state_vec = torch.cat([time0, qpos, qvel])
        if self.derived_fields:
            derived, warmstart = physics.forward(self.model_id, state_vec[None])
            derived, warmstart = derived[0], warmstart[0]
        else:
            derived = torch.zeros_like(qpos[:0], memory_format=torch.contiguous_format)
            warmstart = torch.zeros_like(qvel)
        # zeros_like of the (batched) qpos: under vmap a fresh factory tensor would come out as a
        # stride-0 broadcast, and a compiled step's outputs would then fail its stride guard.
        time = torch.zeros_like(qpos[0], dtype=torch.int32)
        return MujocoState(state_vec, warmstart, derived, time)

    def simulate(self, state: MujocoState, action: torch.Tensor, params: TParams) -> MujocoState:
        """gymnasium's ``do_simulation(action, frame_skip)``: the next state, time + 1 (one
        physics call for a batch of any leading shape)."""
        batch = state.time.shape

        def rows(x: torch.Tensor) -> torch.Tensor:
            return x.reshape(-1, x.shape[-1])

        next_physics, warmstart, derived = physics.step(
            self.model_id,
            rows(state.physics),
            rows(state.warmstart),
            rows(action.to(torch.float64)),
            params.frame_skip,
        )
        return MujocoState(
            next_physics.reshape(*batch, -1),
            warmstart.reshape(*batch, -1),
            derived.reshape(*batch, -1),
            state.time + 1,
        )

    def check_action(self, state: MujocoState, action: torch.Tensor, params: TParams) -> None:
        """Shape and dtype always (free when compiled); finite values in eager mode."""
        core.check_action_static(action, self.action_space(params), batch_shape=state.time.shape)
        if not control.is_traced() and not bool(torch.isfinite(action).all()):
            raise ValueError(f"action: expected finite values, got {action.tolist()}")

    def truncated(self, state: MujocoState, params: TParams) -> torch.Tensor:
        return core.time_limit_reached(state.time, params)

    @staticmethod
    def action_square_sum(action: torch.Tensor) -> torch.Tensor:
        """``sum(action^2)`` in float64: the control costs' ``np.sum(np.square(action))``."""
        return action.to(torch.float64).square().sum(-1)

    @staticmethod
    def never(state: MujocoState) -> torch.Tensor:
        return torch.zeros_like(state.time, dtype=torch.bool)

    # -- reset noise ---------------------------------------------------------------------------

    @staticmethod
    def uniform(key: torch.Tensor, size: int, low: float, high: float) -> torch.Tensor:
        """``np_random.uniform(low, high, size)``'s distribution, float64."""
        return random.uniform(key, (size,), torch.float64, low, high)

    @staticmethod
    def normal(key: torch.Tensor, size: int) -> torch.Tensor:
        """``np_random.standard_normal(size)``'s distribution, float64."""
        return random.normal(key, (size,), torch.float64)

    def noisy_reset(
        self, key: torch.Tensor, params: Any, qvel_noise: Literal["uniform", "normal"] = "uniform"
    ) -> tuple[torch.Tensor, MujocoState]:
        """The ``reset_model`` most v5 envs share: ``qpos + U(-s, s)``, and ``qvel + U(-s, s)``
        (``qvel_noise="uniform"``) or ``qvel + s * N(0, 1)`` (``"normal"``), with
        ``s = params.reset_noise_scale``; the first observation and the state."""
        key_qpos, key_qvel = random.split(key)
        s = params.reset_noise_scale
        qpos = self.init_qpos(key.device) + self.uniform(key_qpos, self.nq, -s, s)
        if qvel_noise == "uniform":
            qvel = self.init_qvel(key.device) + self.uniform(key_qvel, self.nv, -s, s)
        elif qvel_noise == "normal":
            qvel = self.init_qvel(key.device) + s * self.normal(key_qvel, self.nv)
        else:
            raise ValueError(f"qvel_noise: expected 'uniform' or 'normal', got {qvel_noise!r}")
        state = self.new_state(qpos, qvel)
        return self.to_agent(self.get_obs(state, params)), state

    # -- the interface -------------------------------------------------------------------------

    def step_keys(self, key: torch.Tensor, params: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """``step_env`` draws nothing, so ``reset_env`` takes the whole key (no split)."""
        return key, key

    def observation_size(self, params: TParams) -> int:
        raise NotImplementedError

    def observation_space(self, params: TParams | None = None) -> Box:
        p = self.default_params if params is None else params
        return Box(-math.inf, math.inf, (self.observation_size(p),), torch.float32)

    def action_space(self, params: TParams | None = None) -> Box:
        return Box(self.ctrl_low, self.ctrl_high, (self.nu,), torch.float32)

    @staticmethod
    def to_agent(obs: torch.Tensor) -> torch.Tensor:
        """The float32 observation agents get from the float64 one."""
        return obs.to(torch.float32)


def _shared_or_tuple(values: list[float]) -> float | tuple[float, ...]:
    """A Box bound: the one value if all are equal, else the tuple of them."""
    return values[0] if len(set(values)) == 1 else tuple(values)


def make_factory(env_cls: type[MujocoEnv], params_cls: type) -> Any:
    """``make(env_id, **options)`` for a MuJoCo env: options are ``params_cls``'s fields (gymnasium's
    keyword options); ``xml_file`` is refused since the model is fixed per id."""

    def make_env(**kwargs: Any) -> tuple[MujocoEnv, Any]:
        env_id = env_cls.env_id
        if "xml_file" in kwargs:
            raise TypeError(
                f"{env_id}: xml_file is not supported: the model is gymnasium's {env_cls.xml_file!r}"
            )
        return env_cls(), core.params_from_kwargs(params_cls, env_id, kwargs)

    make_env.__doc__ = f"``make({env_cls.env_id!r}, **options)``: options are {params_cls.__name__}'s fields."
    return make_env
