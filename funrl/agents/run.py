"""Runs on disk: ``train`` into an output folder, ``resume`` it, ``evaluate`` its checkpoints.

A run folder holds ``config.json`` (algorithm, agent config, seeds, device), ``metrics.csv``
(one row per update per seed), ``learning_curve.png`` (mean ± std over seeds against env steps),
``timing.json`` (seconds of the first update's call, which holds the compile, and of the rest of
training, for the last ``train`` or resume) and ``checkpoint.pt`` (every train-state leaf of every seed, the run keys and the update count;
loaded with ``torch.load(weights_only=True)``, written atomically). The checkpoint is written
after the metrics of the same update, so a run killed at any moment resumes from a consistent
pair: rows past the checkpoint's update are dropped on resume and recomputed identically.

A sweep (``sweep={"learning_rate": [1e-3, 3e-4]}``, ``funrl train --sweep learning_rate=1e-3,3e-4``)
trains every grid point with every seed as one vmapped batch: the run's *members* are point-major,
member ``p * num_seeds + s`` is seed ``s`` (the key of seed ``s`` in a run without a sweep) with
the hyper-parameters of point ``p``, which ride in its train state (the agent's ``SWEEPABLE``
fields, so the whole grid shares one compiled step). ``config.json`` holds the grid,
``metrics.csv`` rows carry their ``point``, the plot draws one curve per point and evaluation
adds each point's mean (``per_point``).

Under torchrun the members (seeds, or grid points x seeds) are sharded over the ranks and rank 0
writes the same folder, or one agent's environments are spread over them (``data_parallel``);
see :mod:`funrl.distributed`.

A config whose ``env_id`` is ``gym:ID`` trains on the gymnasium env ``ID`` through
``funrl.envs.from_gymnasium(ID, num_envs)``: eagerly, one seed per run, and without resume
(see :func:`train_run`); ``config.json`` keeps ``gym:ID``, so evaluation rebuilds the same env.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import inspect
import io
import itertools
import json
import math
import threading
import time
import types
import typing
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium
import torch

from funrl import distributed, envs
from funrl import tree as ftree
from funrl.agents import common, registry
from funrl.agents.checkpoint import CheckpointError, atomic_write_bytes, load_checkpoint, save_checkpoint

__all__ = [
    "GYMNASIUM_PREFIX",
    "build_agent",
    "check_gymnasium_id",
    "config_overrides",
    "gymnasium_id",
    "sweep_grid",
    "train_run",
    "read_run",
    "evaluate_run",
    "load_run",
    "RunError",
]

CHECKPOINT = "checkpoint.pt"
METRICS = "metrics.csv"
CONFIG = "config.json"
PLOT = "learning_curve.png"
TIMING = "timing.json"
GYMNASIUM_PREFIX = "gym:"


class RunError(ValueError):
    """A run folder or option that cannot be used; the message is one line for the CLI."""


def _config_to_json(config: Any) -> dict[str, Any]:
    out = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


def _config_from_json(cls: type, data: dict[str, Any]) -> Any:
    names = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise RunError(f"config: unknown fields {unknown} for {cls.__name__}")
    return cls(**{name: _as_tuples(value) for name, value in data.items()})


def config_overrides(config_type: type, pairs: Sequence[str], arg: str = "--set") -> dict[str, Any]:
    """``["name=value", ...]`` as fields of the dataclass ``config_type``, each value of its field's type.

    A value is read as JSON where the field takes numbers, bools or tuples (``128``, ``3e-4``,
    ``false``, ``[256, 256]``, an int where a float goes) and as it is where it takes a string
    (``relu``); ``env_kwargs`` also takes a JSON object (``{"landmark_range": 0.8}``). The config's
    own checks then judge the values. A RunError names ``arg`` and the field otherwise.
    """
    hints = typing.get_type_hints(config_type)
    names = [f.name for f in dataclasses.fields(config_type)]
    out: dict[str, Any] = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or name not in names:
            raise RunError(
                f"{arg}: expected NAME=VALUE with NAME a field of {config_type.__name__} "
                f"({', '.join(names)}), got {pair!r}"
            )
        if name in out:
            raise RunError(f"{arg}: {name} is given twice; expected each name once")
        out[name] = _field_value(hints[name], text, f"{arg} {name}")
    return out


def _field_value(hint: Any, text: str, where: str) -> Any:
    """``text`` as a value of the type ``hint`` (``int``, ``float | None``, ``tuple[int, ...]``, ...)."""
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    kinds = [typing.get_origin(t) or t for t in (typing.get_args(hint) if union else (hint,))]
    if str in kinds:
        return text
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = text
    if value is None and type(None) in kinds:
        return None
    if isinstance(value, bool):
        if bool in kinds:
            return value
    elif isinstance(value, int) and int in kinds:
        return value
    elif isinstance(value, (int, float)) and float in kinds:
        return float(value)
    elif isinstance(value, (list, dict)) and tuple in kinds:
        return _as_tuples(list(value.items()) if isinstance(value, dict) else value)
    expected = " or ".join("null" if k is type(None) else "a JSON list" if k is tuple else k.__name__ for k in kinds)
    raise RunError(f"{where}: expected {expected}, got {text!r}")


def _as_tuples(value: Any) -> Any:
    """JSON lists, nested ones too, as tuples (config fields are hashable)."""
    return tuple(_as_tuples(v) for v in value) if isinstance(value, (list, tuple)) else value


def gymnasium_id(env_id: Any) -> str | None:
    """``ID`` when ``env_id`` is ``gym:ID`` (a gymnasium env, trained through ``from_gymnasium``), else None."""
    if isinstance(env_id, str) and env_id.startswith(GYMNASIUM_PREFIX):
        return env_id[len(GYMNASIUM_PREFIX) :]
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def check_gymnasium_id(env_id: str, arg: str = "env_id") -> None:
    """Raise :class:`RunError` naming ``arg`` when ``gym:ID`` cannot be made by gymnasium.

    Cheap: looks ``ID`` up in gymnasium's registry and imports its entry point (which is where
    a missing extra such as Box2D shows), without building an env. A funrl id passes unchecked.
    """
    gym_id = gymnasium_id(env_id)
    if gym_id is None:
        return
    try:
        spec = gymnasium.spec(gym_id)
        if isinstance(spec.entry_point, str):
            gymnasium.envs.registration.load_env_creator(spec.entry_point)
    except (gymnasium.error.Error, ImportError) as exc:
        raise RunError(
            f"{arg}: expected {GYMNASIUM_PREFIX}ID with ID a gymnasium env that can be made here, "
            f"got {env_id!r} ({_first_line(exc)})"
        ) from exc


def agent_spec(algo: str) -> registry.AgentSpec:
    """The registered agent ``algo``; a RunError naming ``algo`` and the known names otherwise."""
    try:
        return registry.get_agent(algo)
    except ValueError as exc:
        raise RunError(str(exc)) from None


def build_agent(
    algo: str, config: Any, device: str, data_parallel: distributed.DataParallel | None = None
) -> common.Agent:
    """The agent of ``algo`` for ``config``; a ``gym:ID`` env id builds it on ``from_gymnasium(ID)``.

    ``data_parallel``: this rank's place in a data-parallel agent, for an agent whose
    ``make_train`` takes ``data_parallel`` (a RunError naming the agents that do otherwise).
    """
    make_train = agent_spec(algo).make_train
    extra: dict[str, Any] = {}
    if data_parallel is not None:
        if "data_parallel" not in inspect.signature(make_train).parameters:
            able = [name for name in registry.registered_agents() if _takes_data_parallel(name)]
            raise RunError(f"data_parallel: {algo} has no data-parallel update; agents with one: {able}")
        extra["data_parallel"] = data_parallel
    gym_id = gymnasium_id(config.env_id)
    if gym_id is None:
        return make_train(config, device=device, **extra)
    if data_parallel is not None:
        raise RunError(f"data_parallel: {config.env_id} is a host gymnasium env; expected a funrl env id")
    check_gymnasium_id(config.env_id)
    try:
        env, _ = envs.from_gymnasium(gym_id, config.num_envs, device, **dict(config.env_kwargs))
    except gymnasium.error.Error as exc:
        raise RunError(f"env_id: gymnasium could not make {gym_id!r} ({_first_line(exc)})") from exc
    return make_train(config, env=env, device=device)


def _takes_data_parallel(algo: str) -> bool:
    return "data_parallel" in inspect.signature(agent_spec(algo).make_train).parameters


def _run_keys(config: Any, seed: int, num_seeds: int) -> torch.Tensor:
    """Seed ``i`` trains from ``fold_in(key(seed), i)``: ``[num_seeds, 2]`` keys, vmapped.

    A host gymnasium env trains one unbatched key ``[2]`` (it cannot be vmapped), the same key
    as seed 0 of a funrl env's run.
    """
    if gymnasium_id(config.env_id) is not None:
        return common.seed_keys(seed, 1)[0]
    return common.seed_keys(seed, num_seeds)


def sweep_grid(sweep: Mapping[str, Sequence[float]] | None) -> list[dict[str, float]]:
    """The grid points of ``sweep`` (``{name: values}``): every combination of the values, the
    last name varying fastest (``itertools.product``); ``[{}]``, one point, without a sweep.

    A ValueError naming ``sweep`` for anything but a mapping of names to non-empty sequences of
    finite real numbers.
    """
    if sweep is None:
        return [{}]
    if not isinstance(sweep, Mapping) or not sweep:
        raise ValueError(f"sweep: expected a non-empty mapping of names to values, got {sweep!r}")
    for name, values in sweep.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
            raise ValueError(f"sweep: expected a non-empty list of numbers for {name!r}, got {values!r}")
        for v in values:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"sweep: expected finite numbers for {name!r}, got {v!r}")
    names = list(sweep)
    return [dict(zip(names, map(float, combo), strict=True)) for combo in itertools.product(*sweep.values())]


def _members(meta: dict[str, Any]) -> list[dict[str, int]]:
    """Each member of a run, in order: its seed, and its grid point when the run is a sweep."""
    seeds = range(meta["num_seeds"])
    if meta.get("sweep") is None:
        return [{"seed": s} for s in seeds]
    return [{"point": p, "seed": s} for p in range(len(sweep_grid(meta["sweep"]))) for s in seeds]


def _member_keys_and_hparams(
    config: Any, meta: dict[str, Any]
) -> tuple[torch.Tensor, dict[str, torch.Tensor] | None]:
    """Every member's run key (seed ``s``'s, whatever its point) and, for a sweep, its point's
    hyper-parameters as float64 ``[members]`` tensors (rounded like the config's floats by ``init``)."""
    keys = _run_keys(config, meta["seed"], meta["num_seeds"])
    if meta.get("sweep") is None:
        return keys, None
    points = sweep_grid(meta["sweep"])
    hparams = {
        name: torch.tensor([point[name] for point in points], dtype=torch.float64).repeat_interleave(
            meta["num_seeds"]
        )
        for name in meta["sweep"]
    }
    return keys.repeat(len(points), 1), hparams


def _check_sweep(agent: common.Agent, config: Any, sweep: Mapping[str, Sequence[float]]) -> None:
    """Each swept name is a sweepable hyper-parameter of the agent, and each value a valid one
    (the config with that value passes its own checks); a RunError naming ``sweep`` otherwise."""
    points = sweep_grid(sweep)
    try:
        agent.init(common.seed_keys(0, None), **points[0])
    except ValueError as exc:
        raise RunError(f"sweep: {str(exc).removeprefix('hparams: ')}") from None
    for point in points:
        try:
            dataclasses.replace(config, **point)
        except ValueError as exc:
            raise RunError(f"sweep: {exc}") from None


def _check_host_run(config: Any, num_seeds: int, compile: bool, sweep: Any) -> None:
    """A ``gym:ID`` run: one seed, eagerly (the CLI checks the same with its own option names)."""
    if gymnasium_id(config.env_id) is None:
        return
    if sweep is not None:
        raise RunError(
            f"sweep: {config.env_id} is one set of host gymnasium envs, which cannot be vmapped "
            "over grid points; expected no sweep (train each point as its own run)"
        )
    if num_seeds != 1:
        raise RunError(
            f"num_seeds: {config.env_id} is one set of host gymnasium envs, which cannot be vmapped "
            f"over seeds; expected 1, got {num_seeds} (train each seed as its own run)"
        )
    if compile:
        raise RunError(
            f"compile: {config.env_id} is a host gymnasium env, which torch.compile cannot trace; "
            "expected compile=False"
        )


def read_run(out: Path) -> tuple[str, Any, dict[str, Any]]:
    """``(algo, config, meta)`` of the run folder ``out`` (its ``config.json``); a RunError if there is none."""
    path = out / CONFIG
    if not path.is_file():
        raise RunError(f"out: {out} holds no {CONFIG}; is it a funrl run folder?")
    try:
        meta = json.loads(path.read_text())
        algo = meta["algo"]
        config = _config_from_json(agent_spec(algo).config_type, meta["config"])
    except (KeyError, json.JSONDecodeError, TypeError) as exc:
        raise RunError(f"out: {path} is not a valid run config ({exc})") from exc
    return algo, config, meta


def _write_metrics(out: Path, rows: list[dict[str, Any]], header: list[str], append: bool) -> None:
    path = out / METRICS
    new = not append or not path.exists()
    with path.open("w" if new else "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header)
        if new:
            writer.writeheader()
        writer.writerows(rows)
        f.flush()


def _truncate_metrics(out: Path, last_update: int) -> list[str] | None:
    """Keep rows with ``update <= last_update`` (atomically); return the header."""
    path = out / METRICS
    if not path.exists():
        return None
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames
        rows = [r for r in reader if int(r["update"]) <= last_update]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=header)
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_bytes(path, lambda f: f.write(buf.getvalue().encode()))
    return list(header) if header else None


def _rows(
    host: dict[str, torch.Tensor], last_update: int, steps_per_update: int, members: list[dict[str, int]]
) -> list[dict]:
    count = next(iter(host.values())).shape[0]
    rows = []
    for u in range(count):
        update = last_update - count + u + 1
        for m, member in enumerate(members):
            row = {"update": update, **member, "env_steps": update * steps_per_update}
            for name, values in host.items():
                v = values[u] if values.dim() == 1 else values[u, m]
                row[name] = float(v)
            rows.append(row)
    return rows


def learning_curve(
    rows: Iterable[dict[str, Any]], metric: str = "episode_return", point: int | None = None
) -> tuple[list[int], torch.Tensor]:
    """``(env_steps, values)``: ``metric`` of every seed at every update of ``metrics.csv`` rows
    (of a sweep's grid point ``point`` only, when given).

    ``values`` is ``[len(env_steps), num_seeds]``. An update in which a seed finished no episode
    (a NaN ``episode_return``) carries that seed's last finite value forward, as SB3's episode
    buffer does, so every seed counts at every point; the points before every seed has a finite
    value are left out.
    """
    by_step: dict[int, dict[int, float]] = {}
    for row in rows:
        if point is not None and int(row["point"]) != point:
            continue
        by_step.setdefault(int(row["env_steps"]), {})[int(row["seed"])] = float(row[metric])
    seeds = sorted({seed for values in by_step.values() for seed in values})
    last = {seed: math.nan for seed in seeds}
    steps, curve = [], []
    for step in sorted(by_step):
        for seed, value in by_step[step].items():
            if math.isfinite(value):
                last[seed] = value
        if all(math.isfinite(last[seed]) for seed in seeds):
            steps.append(step)
            curve.append([last[seed] for seed in seeds])
    return steps, torch.tensor(curve, dtype=torch.float64).reshape(len(steps), len(seeds))


def plot_learning_curve(out: Path, metric: str = "episode_return") -> Path | None:
    """Mean ± std over seeds of ``metric`` against env steps (:func:`learning_curve`), one curve
    per grid point of a sweep; a PNG, or None when ``metrics.csv`` is missing or no curve has a
    value for every seed."""
    path = out / METRICS
    if not path.exists():
        return None
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    _, _, meta = read_run(out)
    points = sweep_grid(meta.get("sweep"))
    curves = [
        (learning_curve(rows, metric, p if meta.get("sweep") else None), point)
        for p, point in enumerate(points)
    ]
    curves = [(steps, values, point) for (steps, values), point in curves if steps]
    if not curves:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    for i, (steps, values, point) in enumerate(curves):
        mean = values.mean(dim=1)
        std = values.std(dim=1, correction=0)
        label = ", ".join(f"{name}={value:g}" for name, value in point.items()) if point else None
        ax.plot(steps, mean.tolist(), color=f"C{i}", label=label)
        ax.fill_between(steps, (mean - std).tolist(), (mean + std).tolist(), color=f"C{i}", alpha=0.25)
    if meta.get("sweep"):
        ax.legend()
    ax.set_xlabel("environment steps")
    ax.set_ylabel(f"{metric} (mean ± std over {meta['num_seeds']} seeds)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    target = out / PLOT
    atomic_write_bytes(target, lambda f: fig.savefig(f, format="png"))
    plt.close(fig)
    return target


def train_run(
    algo: str,
    config: Any,
    out: Path,
    seed: int = 0,
    num_seeds: int = 1,
    device: str = "cpu",
    compile: bool = True,
    resume: bool = False,
    checkpoint_every: int = 50,
    progress: bool = True,
    stop_after: int | None = None,
    log_every: int = 10,
    data_parallel: bool = False,
    dist_timeout_s: float = distributed.DEFAULT_TIMEOUT_S,
    sweep: Mapping[str, Sequence[float]] | None = None,
) -> tuple[Any, dict[str, torch.Tensor]]:
    """Train (or resume) a run in ``out``; returns the final train state and this call's metrics.

    Metrics are brought to the host (and checked for non-finite values) every ``log_every``
    updates; a checkpoint is written at the first such point at least ``checkpoint_every``
    updates after the previous one, and at the end. ``stop_after`` stops after that many
    updates in total (for tests of interruption). A metric that becomes NaN or infinite stops the
    run with :class:`~funrl.agents.common.NonFiniteError` before its rows or a checkpoint are
    written, so the last checkpoint holds the last good state.

    ``sweep`` (``{name: values}``, names from the agent's ``SWEEPABLE``) trains every point of
    :func:`sweep_grid` with every seed, point-major, as one vmapped batch (see the module's
    docstring); a resumed run continues its own grid.

    Under torchrun (:mod:`funrl.distributed`) the ``num_seeds`` seeds (times the grid points) are
    sharded over the ranks, each rank training its block with the keys and hyper-parameters one
    process would give those members; rank 0 gathers metrics and checkpoints and writes the one
    run folder, the same files a single process writes.
    ``data_parallel`` instead trains one seed of an agent whose ``num_envs`` are spread over the
    ranks (an agent whose ``make_train`` takes ``data_parallel``); its checkpoint holds every
    rank's state (their environments differ), so it resumes on the same number of ranks. Each
    rank returns its own share: its seeds' states and metrics. Outside torchrun both are the
    single-process run. ``dist_timeout_s``: how long a collective waits for a live rank. A process
    group it starts (:func:`funrl.distributed.process_group`) serves the process's later runs too.

    A ``gym:ID`` env (``config.env_id``) trains one seed with ``compile=False`` and cannot be
    resumed: the checkpoint holds only a version handle of the host env (``HostState``), while
    its physics and random generators live in the gymnasium objects, so a resumed run could not
    continue the same episodes. Such a run is reproducible instead: the host envs are seeded
    from the run key at reset, so the same seed retrains it identically.
    """
    out = Path(out)
    with distributed.process_group(device, dist_timeout_s):
        # Rank 0 reads and writes the run folder (other nodes may not see it); every rank then raises
        # the same one-line error, or builds the agent of the same (algo, config, meta).
        setup: Any = None
        agent = None  # the agent _start_run built to check a new run, reused by a single process
        if distributed.is_first():
            try:
                *setup, agent = _start_run(
                    out, algo, config, seed, num_seeds, device, compile, resume, data_parallel, sweep
                )
            except (ValueError, TypeError) as exc:
                setup = exc
        setup = distributed.broadcast_from_first(setup)
        if isinstance(setup, BaseException):
            raise setup
        algo, config, meta = setup
        seed, num_seeds, device = meta["seed"], meta["num_seeds"], meta["device"]
        dp = distributed.data_parallel() if data_parallel else None
        if agent is None or distributed.world_size() > 1:
            agent = build_agent(algo, config, device, dp)
        members = _members(meta)
        layout = _Layout(len(members), dp)
        keys, hparams = _member_keys_and_hparams(config, meta)
        if keys.dim() == 2:
            keys = keys[layout.block.start : layout.block.stop]
            if hparams is not None:
                hparams = {k: v[layout.block.start : layout.block.stop] for k, v in hparams.items()}
        state, run_key = common.init_state(agent, keys, hparams)
        done = 0
        header = None
        if resume:
            loaded = None
            if distributed.is_first():
                template = layout.whole_template((state, run_key))
                loaded = load_checkpoint(out / CHECKPOINT, template, "cpu")
                header = _truncate_metrics(out, int(loaded[1]["update"]))
            (whole, ckpt_meta) = distributed.broadcast_from_first(loaded)
            state, run_key = ftree.map(lambda x: x.to(agent.device), layout.mine(whole))
            done = int(ckpt_meta["update"])
        total = agent.num_updates if stop_after is None else min(stop_after, agent.num_updates)
        remaining = max(total - done, 0)
        bar = None
        if progress and distributed.is_first():
            from tqdm import tqdm

            ranks = f" on {layout.world_size} ranks" if layout.world_size > 1 else ""
            points = f" x{len(members) // num_seeds} points" if meta.get("sweep") else ""
            bar = tqdm(
                total=agent.num_updates * agent.steps_per_update,
                initial=done * agent.steps_per_update,
                unit="step",
                unit_scale=True,
                dynamic_ncols=True,
                desc=f"{algo} {getattr(config, 'env_id', '')} x{num_seeds}{points}{ranks}",
            )
        last_saved = [done]
        header_box = [header]

        def on_log(update: int, state_and_key: Any, local_host: dict[str, torch.Tensor]) -> None:
            host = layout.metrics(distributed.gather_to_first(local_host))
            save = update - last_saved[0] >= checkpoint_every or update == total
            whole = layout.whole(distributed.gather_to_first(state_and_key)) if save else None
            last_saved[0] = update if save else last_saved[0]
            if host is None:  # not rank 0: it only contributed its share
                return
            rows = _rows(host, update, agent.steps_per_update, members)
            if header_box[0] is None:
                header_box[0] = list(rows[0].keys())
                _write_metrics(out, rows, header_box[0], append=False)
            else:
                _write_metrics(out, rows, header_box[0], append=True)
            if bar is not None:
                count = next(iter(host.values())).shape[0]
                bar.update(count * agent.steps_per_update)
                ret = host.get("episode_return")
                if ret is not None:
                    finite = ret[torch.isfinite(ret)]
                    if finite.numel():
                        bar.set_postfix(ret=f"{float(finite.mean()):.1f}")
            if save:
                save_checkpoint(out / CHECKPOINT, whole, {"update": update, "algo": algo})

        def train_for(updates: int, state: Any) -> tuple[Any, dict[str, torch.Tensor]]:
            return common.train(
                agent,
                keys,
                compile=compile,
                state=state,
                run_key=run_key,
                num_updates=updates,
                callback=on_log,
                log_every=log_every,
            )

        # The first update runs alone: its call holds the compile, timed apart from training.
        t0 = time.perf_counter()
        try:
            with distributed.stop_on_sigterm():
                with _compiling_note(bar if compile else None):
                    state, first = train_for(min(1, remaining), state)
                t1 = time.perf_counter()
                state, rest = train_for(remaining - min(1, remaining), state)
        finally:
            if bar is not None:
                bar.close()
        if distributed.is_first():
            timing = {"first_update_s": t1 - t0, "train_s": time.perf_counter() - t1, "updates": remaining}
            atomic_write_bytes(out / TIMING, lambda f: f.write(json.dumps(timing, indent=2).encode()))
            plot_learning_curve(out)
        metrics = {k: torch.cat([first[k], rest[k]]) for k in first} if first and rest else first or rest
        return state, metrics


def _start_run(
    out: Path,
    algo: str,
    config: Any,
    seed: int,
    num_seeds: int,
    device: str,
    compile: bool,
    resume: bool,
    data_parallel: bool,
    sweep: Mapping[str, Sequence[float]] | None,
) -> tuple[str, Any, dict[str, Any], common.Agent | None]:
    """``(algo, config, meta, agent)`` of the run to train: read from ``out`` to resume (agent
    None), else checked by building the agent (a bad option or env id leaves no half-made run
    folder) and written to ``out/config.json``."""
    world = distributed.world_size()
    if resume and sweep is not None:
        raise RunError(f"sweep: a resumed run continues the grid in {out / CONFIG}; expected no sweep")
    if resume:
        algo, config, meta = read_run(out)
        if gymnasium_id(config.env_id) is not None:
            raise RunError(
                f"resume: {out} trained on {config.env_id}, a host gymnasium env whose state (physics, "
                "random generators) lives in gymnasium's objects, not in the checkpoint (it holds only "
                f"a handle), so it cannot continue exactly; train again with --seed {meta['seed']}, "
                "which reproduces the run"
            )
        trained_on = meta.get("data_parallel_ranks")
        if (trained_on is not None) != data_parallel or (data_parallel and trained_on != world):
            how = f"data-parallel on {trained_on} ranks" if trained_on else "without data parallelism"
            raise RunError(
                f"data_parallel: {out} was trained {how}; resume it the same way (each rank's "
                f"environments are in its checkpoint), got {world} ranks"
                + (" with data parallelism" if data_parallel else " without data parallelism")
            )
        meta = {**meta, "device": meta.get("device", device)}
    else:
        if (out / CHECKPOINT).exists():
            raise RunError(
                f"out: {out} already holds a run; pass --resume to continue it or pick another --out"
            )
        _check_host_run(config, num_seeds, compile, sweep)
        sweep_grid(sweep)  # a malformed grid is an error before anything is built
        meta = {
            "algo": algo,
            "config": _config_to_json(config),
            "seed": seed,
            "num_seeds": num_seeds,
            "device": device,
        }
        if sweep is not None:
            meta["sweep"] = {name: [float(v) for v in values] for name, values in sweep.items()}
        if data_parallel:
            meta["data_parallel_ranks"] = world
    if data_parallel and meta.get("sweep") is not None:
        raise RunError("sweep: a data-parallel run trains one agent across the ranks; expected no sweep")
    if data_parallel and meta["num_seeds"] != 1:
        raise RunError(
            f"num_seeds: a data-parallel run trains one agent across the ranks; expected 1, "
            f"got {meta['num_seeds']} (shard seeds over ranks without data parallelism instead)"
        )
    if not data_parallel:
        what = "num_seeds x sweep points" if meta.get("sweep") else "num_seeds"
        distributed.shard(len(_members(meta)), 0, world, what)  # at least one member per rank
    agent = None
    if not resume:
        # Built before anything is written, so a bad env id leaves no half-made run folder.
        dp = distributed.DataParallel(0, world) if data_parallel else None
        agent = build_agent(algo, config, device, dp)
        if sweep is not None:
            _check_sweep(agent, config, sweep)
        out.mkdir(parents=True, exist_ok=True)
        text = json.dumps(meta, indent=2)
        atomic_write_bytes(out / CONFIG, lambda f: f.write(text.encode()))
    return algo, config, meta, agent


class _Layout:
    """Where a rank's share sits in the run's whole: its block of the member dimension (sharded
    seeds, or grid points x seeds), or its row of a new leading rank dimension (data parallelism,
    whose ranks hold different environments of one agent). One rank without data parallelism: the
    share is the whole."""

    def __init__(self, num_members: int, dp: distributed.DataParallel | None) -> None:
        self.world_size = distributed.world_size()
        self.rank = distributed.rank()
        self.data_parallel = dp is not None
        self.block = range(num_members) if dp else distributed.shard(num_members, self.rank, self.world_size)
        self.num_members = num_members

    def whole(self, shares: list[Any] | None) -> Any:
        if shares is None:
            return None
        if len(shares) == 1 and not self.data_parallel:  # one process: its share is the whole
            return shares[0]
        return ftree.stack(shares) if self.data_parallel else distributed.stack_over(shares)

    def whole_template(self, share: Any) -> Any:
        if self.data_parallel:
            return ftree.map(lambda x: x.new_empty((self.world_size, *x.shape), device="cpu"), share)
        return ftree.map(lambda x: x.new_empty((self.num_members, *x.shape[1:]), device="cpu"), share)

    def mine(self, whole: Any) -> Any:
        if self.data_parallel:
            return ftree.map(lambda x: x[self.rank], whole)
        return ftree.map(lambda x: x[self.block.start : self.block.stop], whole)

    def metrics(self, shares: list[dict[str, torch.Tensor]] | None) -> dict[str, torch.Tensor] | None:
        """All members' metrics ``[updates, members]``; a data-parallel update reports the same
        (all-reduced) metrics on every rank, so rank 0's are the agent's."""
        if shares is None:
            return None
        if self.data_parallel or len(shares) == 1:  # one process: its metrics as they are
            return shares[0]
        return {name: torch.cat([share[name] for share in shares], dim=1) for name in shares[0]}


@contextlib.contextmanager
def _compiling_note(bar: Any) -> Iterator[None]:
    """While the first (compiling) update runs, the progress bar says so and its clock keeps moving."""
    if bar is None:
        yield
        return
    desc = bar.desc
    bar.set_description_str(f"{desc} (compiling the update step)")
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(1.0):
            bar.refresh()

    ticker = threading.Thread(target=tick, name="funrl-progress", daemon=True)
    ticker.start()
    try:
        yield
    finally:
        stop.set()
        ticker.join()
        bar.set_description_str(desc)


def load_run(out: Path, device: str | None = None) -> tuple[common.Agent, Any, dict[str, Any]]:
    """``(agent, train_state, meta)`` of the run folder ``out``'s checkpoint, every seed.

    A data-parallel run's checkpoint holds every rank's state (its share of the environments,
    the same params); rank 0's is returned, with an agent of all the environments in one process.
    """
    out = Path(out)
    algo, config, meta = read_run(out)
    device = device or meta.get("device", "cpu")
    ranks = meta.get("data_parallel_ranks")
    agent = build_agent(algo, config, device)
    shaped = build_agent(algo, config, device, distributed.DataParallel(0, ranks)) if ranks else agent
    keys, hparams = _member_keys_and_hparams(config, meta)
    template = common.init_state(shaped, keys, hparams)
    if ranks:
        template = ftree.map(lambda x: x.new_empty((ranks, *x.shape)), template)
    try:
        (state, _), _ = load_checkpoint(out / CHECKPOINT, template, device)
    except CheckpointError as exc:
        raise RunError(str(exc)) from exc
    if ranks:
        state = ftree.map(lambda x: x[0], state)
    return agent, state, meta


def evaluate_run(
    out: Path, episodes: int = 20, device: str | None = None, seed: int = 1_000_003
) -> dict[str, Any]:
    """Evaluate every member's final checkpoint greedily for ``episodes`` episodes.

    ``per_seed`` holds each member's mean return in the run's order (a sweep's are point-major);
    a sweep adds ``per_point``: each grid point's values and its seeds' mean return.

    A ``gym:ID`` run is evaluated on a fresh ``from_gymnasium(ID, num_envs)`` env, ``num_envs``
    episodes at a time (a host env runs all its envs at once and cannot be resized); the first
    ``episodes`` returns count.
    """
    agent, state, meta = load_run(out, device)
    config = agent.config
    per_seed = []
    from funrl import random, tree

    host = gymnasium_id(config.env_id) is not None
    seeds_params = [state.params] if host else tree.unstack(state.params)
    for i, params in enumerate(seeds_params):
        key = random.fold_in(random.key(seed), i)
        if host:
            rounds = -(-episodes // config.num_envs)
            returns = torch.cat(
                [
                    common.evaluate(agent, params, random.fold_in(key, r), config.num_envs)
                    for r in range(rounds)
                ]
            )[:episodes]
        else:
            returns = common.evaluate(agent, params, key, episodes)
        per_seed.append(float(returns.mean()))
    t = torch.tensor(per_seed)
    result: dict[str, Any] = {
        "mean_return": float(t.mean()),
        "std_return": float(t.std(correction=0)) if len(per_seed) > 1 else 0.0,
        "per_seed": per_seed,
    }
    if meta.get("sweep") is not None:
        by_point = t.reshape(-1, meta["num_seeds"]).mean(dim=1).tolist()
        points = sweep_grid(meta["sweep"])
        result["per_point"] = [{**p, "mean_return": r} for p, r in zip(points, by_point, strict=True)]
    return result
