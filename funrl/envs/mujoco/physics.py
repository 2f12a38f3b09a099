"""Batched MuJoCo physics as torch custom operators: one call steps N environments on threads.

Two operators in the ``funrl`` namespace, both taking ints and float64 tensors only (no Python
objects, so ``torch.compile`` keeps each as one opaque node and ``vmap`` batches them)::

    torch.ops.funrl.mujoco_step(model_id, states[N, S], warmstarts[N, nv], controls[N, U], frame_skip)
        -> (next_states[N, S], next_warmstarts[N, nv], derived[N, D])
    torch.ops.funrl.mujoco_forward(model_id, states[N, S])
        -> (derived[N, D], warmstarts[N, nv])

``states`` is ``mj_getState(model, data, mjSTATE_FULLPHYSICS)``'s layout (time, qpos, qvel for
the gymnasium models). ``warmstarts`` is ``data.qacc_warmstart``, the constraint solver's starting
point: it is not part of FULLPHYSICS, but gymnasium's environments keep it in their ``MjData``
from step to step and it changes the result (Humanoid's PGS solver stops after 50 iterations, far
from convergence), so it travels with the state to reproduce gymnasium exactly. ``derived`` holds
the ``MjData`` fields an environment reads besides the state (``cfrc_ext``, ``cinert``, body
positions, ...), flattened and concatenated in the order given to :func:`model_id`. They are what
``MjData`` holds after the call, as gymnasium reads them: ``mj_step`` computes positions,
velocities and forces in its forward pass *before* integrating, so after a step they belong to the
state one substep earlier; ``cfrc_ext`` comes from ``mj_rnePostConstraint`` after the last substep,
as gymnasium's ``do_simulation`` calls it.

``mujoco_step`` per environment: one ``mj_setState`` of the state, the warm start and the controls
(one row of the three concatenated, in ``mj_setState``'s layout for those parts), ``frame_skip``
calls of ``mj_step``, ``mj_rnePostConstraint`` when ``cfrc_ext`` is read, one ``mj_getState`` of
the state and the warm start, then the derived fields. Few binding calls per environment matter
for threads: the Python between MuJoCo's calls holds the GIL, and the workers queue on it.
``mujoco_forward`` is gymnasium's reset: ``mj_resetData`` (zero controls, warm start and forces),
``mj_setState``, ``mj_forward``.

The environments of a batch are split into one contiguous chunk per thread; each thread owns one
``MjData`` per model and runs its chunk with the GIL released inside MuJoCo's calls. Why not
``mujoco.rollout``: it returns neither the final warm start nor fields beyond the state and
sensors (``cinert``, ``cvel``, ``cfrc_ext``, ``qfrc_constraint`` have no sensor), so it cannot
reproduce gymnasium's environments exactly. The thread count (:func:`set_num_threads`) changes
only the speed: every environment's arithmetic is the same on any thread.

No gradients: MuJoCo's C code is not differentiable through torch; asking for one raises.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import mujoco
import numpy as np
import torch

__all__ = [
    "MujocoModel",
    "Workspace",
    "model_id",
    "get_model",
    "asset_path",
    "set_num_threads",
    "get_num_threads",
    "step",
    "forward",
]

FULLPHYSICS = mujoco.mjtState.mjSTATE_FULLPHYSICS
# mj_setState/mj_getState lay the parts of a spec out in the order of their bits: the state
# (time, qpos, qvel), then the warm start, then the controls.
STEP_INPUT = FULLPHYSICS | mujoco.mjtState.mjSTATE_WARMSTART | mujoco.mjtState.mjSTATE_CTRL
STEP_OUTPUT = FULLPHYSICS | mujoco.mjtState.mjSTATE_WARMSTART


def asset_path(xml_file: str) -> str:
    """The path of one of gymnasium's MuJoCo XML assets (``gymnasium/envs/mujoco/assets``)."""
    import gymnasium.envs.mujoco

    path = os.path.join(os.path.dirname(gymnasium.envs.mujoco.__file__), "assets", xml_file)
    if not os.path.exists(path):
        raise FileNotFoundError(f"xml_file: gymnasium ships no asset {xml_file!r} (looked for {path})")
    return path


class Workspace:
    """One thread's ``MjData`` and numpy views of the arrays the ops copy in and out (views stay
    valid for the data's lifetime; making them once saves a binding call per array per env)."""

    def __init__(self, model: mujoco.MjModel, fields: tuple[str, ...]) -> None:
        self.data = mujoco.MjData(model)
        self.warmstart = self.data.qacc_warmstart
        self.fields = tuple(getattr(self.data, name).reshape(-1) for name in fields)

    def gather(self, out: np.ndarray) -> None:
        """The derived fields, flattened and concatenated into ``out`` (one numpy call: the
        threads queue on the GIL for every line of Python between MuJoCo's calls)."""
        if self.fields:
            np.concatenate(self.fields, out=out)


@dataclasses.dataclass
class MujocoModel:
    """One compiled model, its sizes as plain ints (``torch.compile`` traces code reading them and
    cannot call into mujoco), its derived-field layout and one workspace per worker thread."""

    xml_file: str
    fields: tuple[str, ...]
    model: mujoco.MjModel
    field_shapes: tuple[tuple[int, ...], ...]
    state_size: int
    nv: int
    nu: int
    derived_size: int
    workspaces: list[Workspace]
    lock: threading.Lock

    def workspaces_for(self, num_threads: int) -> list[Workspace]:
        while len(self.workspaces) < num_threads:
            self.workspaces.append(Workspace(self.model, self.fields))
        return self.workspaces[:num_threads]


_MODELS: dict[int, MujocoModel] = {}
_REGISTRY_LOCK = threading.Lock()


def _stable_id(xml_file: str, fields: tuple[str, ...]) -> int:
    """A 62-bit id of ``(xml_file, fields)``, the same in every process: a compiled graph holds
    the id as a constant, and a saved graph loaded by another process must name the same model
    there (an id by registration order would name whichever model that process made first)."""
    digest = hashlib.sha256(repr((xml_file, fields)).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 2


def model_id(xml_file: str, fields: tuple[str, ...] = ()) -> int:
    """The id of gymnasium's asset ``xml_file`` whose ops also return the ``MjData`` ``fields``.

    The id depends on ``(xml_file, fields)`` only, so it is the same in every process; the model
    is built once per process (the first call parses the XML).
    """
    fields = tuple(fields)
    ident = _stable_id(xml_file, fields)
    with _REGISTRY_LOCK:
        if ident in _MODELS:
            return ident
        model = mujoco.MjModel.from_xml_path(asset_path(xml_file))
        data = mujoco.MjData(model)
        expected = 1 + model.nq + model.nv
        if mujoco.mj_stateSize(model, FULLPHYSICS) != expected:
            raise ValueError(
                f"xml_file: {xml_file!r} has activations, history or plugins; funrl's MuJoCo envs "
                f"expect a FULLPHYSICS state of time, qpos and qvel ({expected} numbers)"
            )
        for name in fields:
            if not isinstance(getattr(data, name, None), np.ndarray):
                raise ValueError(f"fields: {name!r} is not an array field of mujoco.MjData")
        shapes = tuple(tuple(getattr(data, name).shape) for name in fields)
        derived_size = sum(int(np.prod(shape)) for shape in shapes)
        _MODELS[ident] = MujocoModel(
            xml_file, fields, model, shapes, expected, model.nv, model.nu, derived_size, [], threading.Lock()
        )
        return ident


def get_model(model_id: int) -> MujocoModel:
    """The registered model of ``model_id`` (see :func:`model_id`)."""
    entry = _MODELS.get(model_id)
    if entry is None:
        raise ValueError(
            f"model_id: expected an id that funrl.envs.mujoco.physics.model_id returned in this "
            f"process, got {model_id}"
        )
    return entry


_num_threads = min(
    len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1, 8
)
_pool: ThreadPoolExecutor | None = None
_pool_workers = 0


def set_num_threads(num_threads: int) -> None:
    """Threads the physics ops use (default: the usable CPU cores, at most 8). Results do not
    depend on it."""
    global _num_threads
    if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1:
        raise ValueError(f"num_threads: expected a positive int, got {num_threads!r}")
    _num_threads = num_threads


def get_num_threads() -> int:
    """The thread count of the physics ops (see :func:`set_num_threads`)."""
    return _num_threads


def _executor(num_workers: int) -> ThreadPoolExecutor:
    global _pool, _pool_workers
    if _pool is None or _pool_workers != num_workers:
        if _pool is not None:
            _pool.shutdown(wait=True)
        _pool = ThreadPoolExecutor(num_workers, thread_name_prefix="funrl-mujoco")
        _pool_workers = num_workers
    return _pool


def _run_chunks(entry: MujocoModel, num_envs: int, work) -> None:
    """``work(workspace, lo, hi)`` over contiguous chunks of the batch, one workspace per chunk.

    The calling thread runs the last chunk itself: it would otherwise only wait, and a pool of
    ``threads - 1`` workers saves a handoff per call (one thread needs no pool at all)."""
    num_threads = max(1, min(_num_threads, num_envs))
    with entry.lock:
        workspaces = entry.workspaces_for(num_threads)
        bounds = [num_envs * k // num_threads for k in range(num_threads + 1)]
        pool = _executor(num_threads - 1) if num_threads > 1 else None
        futures = [pool.submit(work, workspaces[k], bounds[k], bounds[k + 1]) for k in range(num_threads - 1)]
        try:
            work(workspaces[-1], bounds[-2], bounds[-1])
        finally:
            # The workers' chunks use this model's workspaces: finish them before the lock goes.
            for future in futures:
                future.result()


def _as_numpy(x: torch.Tensor) -> np.ndarray:
    return x.detach().to(device="cpu", dtype=torch.float64).contiguous().numpy()


@torch.library.custom_op("funrl::mujoco_step", mutates_args=(), device_types=None)
def _mujoco_step(
    model_id: int, states: torch.Tensor, warmstarts: torch.Tensor, controls: torch.Tensor, frame_skip: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    entry = get_model(model_id)
    model = entry.model
    inputs = _as_numpy(torch.cat([x.to(torch.float64) for x in (states, warmstarts, controls)], dim=1))
    num_envs = inputs.shape[0]
    outputs = np.empty((num_envs, entry.state_size + entry.nv))
    derived = np.empty((num_envs, entry.derived_size))
    post_constraint = "cfrc_ext" in entry.fields

    def work(ws: Workspace, lo: int, hi: int) -> None:
        data = ws.data
        for i in range(lo, hi):
            mujoco.mj_setState(model, data, inputs[i], STEP_INPUT)
            mujoco.mj_step(model, data, frame_skip)
            if post_constraint:
                mujoco.mj_rnePostConstraint(model, data)
            mujoco.mj_getState(model, data, outputs[i], STEP_OUTPUT)
            ws.gather(derived[i])

    _run_chunks(entry, num_envs, work)
    device = states.device
    next_states = np.ascontiguousarray(outputs[:, : entry.state_size])  # dense, as the fake op says
    next_warm = np.ascontiguousarray(outputs[:, entry.state_size :])
    return (
        torch.from_numpy(next_states).to(device),
        torch.from_numpy(next_warm).to(device),
        torch.from_numpy(derived).to(device),
    )


@torch.library.custom_op("funrl::mujoco_forward", mutates_args=(), device_types=None)
def _mujoco_forward(model_id: int, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    entry = get_model(model_id)
    model = entry.model
    states_np = _as_numpy(states)
    num_envs = states_np.shape[0]
    derived = np.empty((num_envs, entry.derived_size))
    warm = np.empty((num_envs, model.nv))

    def work(ws: Workspace, lo: int, hi: int) -> None:
        data = ws.data
        for i in range(lo, hi):
            mujoco.mj_resetData(model, data)
            mujoco.mj_setState(model, data, states_np[i], FULLPHYSICS)
            mujoco.mj_forward(model, data)
            warm[i] = ws.warmstart
            ws.gather(derived[i])

    _run_chunks(entry, num_envs, work)
    device = states.device
    return torch.from_numpy(derived).to(device), torch.from_numpy(warm).to(device)


@_mujoco_step.register_fake
def _mujoco_step_fake(model_id, states, warmstarts, controls, frame_skip):
    derived = states.new_empty((states.shape[0], get_model(model_id).derived_size))
    return torch.empty_like(states), torch.empty_like(warmstarts), derived


@_mujoco_forward.register_fake
def _mujoco_forward_fake(model_id, states):
    entry = get_model(model_id)
    return (
        states.new_empty((states.shape[0], entry.derived_size)),
        states.new_empty((states.shape[0], entry.nv)),
    )


NO_GRADIENT = (
    "funrl.envs.mujoco: the MuJoCo physics ops have no gradient (MuJoCo's C code is not "
    "differentiable through torch); detach the actions or states before differentiating"
)


def _no_gradient(ctx, *grads):
    raise RuntimeError(NO_GRADIENT)


def _check_batch(model_id: int, **arrays: tuple[torch.Tensor, int]) -> None:
    """Each ``name=(tensor, width)`` is a float64 ``[N, width]`` tensor with one shared N: shapes
    and dtypes only, so the check is free under ``torch.compile``."""
    get_model(model_id)
    batch = None
    for name, (tensor, width) in arrays.items():
        if tensor.dtype != torch.float64:
            raise TypeError(f"{name}: expected dtype torch.float64, got {tensor.dtype}")
        if tensor.dim() != 2 or tensor.shape[1] != width or (batch is not None and tensor.shape[0] != batch):
            expected = f"[{'N' if batch is None else batch}, {width}]"
            raise ValueError(f"{name}: expected shape {expected}, got {list(tensor.shape)}")
        batch = tensor.shape[0]


def _refuse_gradients(**tensors: torch.Tensor) -> None:
    """A clear error where a gradient is asked for (``requires_grad``, ``torch.func.grad``): the op's
    autograd formula would raise only at backward, and torch's own error under ``torch.func``."""
    for name, tensor in tensors.items():
        if tensor.requires_grad:
            raise RuntimeError(f"{name}: requires a gradient, but {NO_GRADIENT}")


def _save_nothing(ctx, inputs, output) -> None:
    return None


torch.library.register_autograd("funrl::mujoco_step", _no_gradient, setup_context=_save_nothing)
torch.library.register_autograd("funrl::mujoco_forward", _no_gradient, setup_context=_save_nothing)


def _flatten_batch(x: torch.Tensor, in_dim: int | None, batch: int) -> torch.Tensor:
    """``[B, N, ...]`` (the vmapped dim moved first, broadcast if absent) as ``[B * N, ...]``."""
    x = x.unsqueeze(0).expand(batch, *x.shape) if in_dim is None else x.movedim(in_dim, 0)
    return x.reshape(batch * x.shape[1], *x.shape[2:])


def _unflatten(outputs: tuple[torch.Tensor, ...], batch: int) -> tuple[torch.Tensor, ...]:
    return tuple(y.reshape(batch, y.shape[0] // batch, *y.shape[1:]) for y in outputs)


@torch.library.register_vmap("funrl::mujoco_step")
def _mujoco_step_vmap(info, in_dims, model_id, states, warmstarts, controls, frame_skip):
    _, states_dim, warm_dim, controls_dim, _ = in_dims
    batch = info.batch_size
    outputs = _mujoco_step(
        model_id,
        _flatten_batch(states, states_dim, batch),
        _flatten_batch(warmstarts, warm_dim, batch),
        _flatten_batch(controls, controls_dim, batch),
        frame_skip,
    )
    return _unflatten(outputs, batch), (0, 0, 0)


@torch.library.register_vmap("funrl::mujoco_forward")
def _mujoco_forward_vmap(info, in_dims, model_id, states):
    batch = info.batch_size
    outputs = _mujoco_forward(model_id, _flatten_batch(states, in_dims[1], batch))
    return _unflatten(outputs, batch), (0, 0)


def step(
    model_id: int, states: torch.Tensor, warmstarts: torch.Tensor, controls: torch.Tensor, frame_skip: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``frame_skip`` physics steps of each of N environments: ``(next_states, next_warmstarts,
    derived)``, float64, shapes ``[N, S]``, ``[N, nv]``, ``[N, D]`` (see the module docstring)."""
    entry = get_model(model_id)
    _check_batch(
        model_id,
        states=(states, entry.state_size),
        warmstarts=(warmstarts, entry.nv),
        controls=(controls, entry.nu),
    )
    if isinstance(frame_skip, bool) or not isinstance(frame_skip, int) or frame_skip < 1:
        raise ValueError(f"frame_skip: expected a positive int, got {frame_skip!r}")
    _refuse_gradients(states=states, warmstarts=warmstarts, controls=controls)
    return torch.ops.funrl.mujoco_step(model_id, states, warmstarts, controls, frame_skip)


def forward(model_id: int, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Gymnasium's reset of N environments to ``states``: ``(derived[N, D], warmstarts[N, nv])``."""
    _check_batch(model_id, states=(states, get_model(model_id).state_size))
    _refuse_gradients(states=states)
    return torch.ops.funrl.mujoco_forward(model_id, states)
