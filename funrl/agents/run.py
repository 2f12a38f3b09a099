"""Runs on disk: ``train`` into an output folder, ``resume`` it, ``evaluate`` its checkpoints.

A run folder holds ``config.json`` (algorithm, agent config, seeds, device), ``metrics.csv``
(one row per update per seed), ``learning_curve.png`` (mean ± std over seeds against env steps)
and ``checkpoint.pt`` (every train-state leaf of every seed, the run keys and the update count;
loaded with ``torch.load(weights_only=True)``, written atomically). The checkpoint is written
after the metrics of the same update, so a run killed at any moment resumes from a consistent
pair: rows past the checkpoint's update are dropped on resume and recomputed identically.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from funrl.agents import common, dqn, ppo, sac, td3
from funrl.agents.checkpoint import CheckpointError, atomic_write_bytes, load_checkpoint, save_checkpoint

__all__ = ["ALGORITHMS", "build_agent", "train_run", "evaluate_run", "RunError"]

ALGORITHMS: dict[str, tuple[type, Callable[..., common.Agent]]] = {
    "ppo": (ppo.PPOConfig, ppo.make_train),
    "dqn": (dqn.DQNConfig, dqn.make_train),
    "sac": (sac.SACConfig, sac.make_train),
    "td3": (td3.TD3Config, td3.make_train),
}

CHECKPOINT = "checkpoint.pt"
METRICS = "metrics.csv"
CONFIG = "config.json"
PLOT = "learning_curve.png"


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
    kwargs = {}
    for name, value in data.items():
        if isinstance(value, list):
            value = tuple(tuple(v) if isinstance(v, list) else v for v in value)
        kwargs[name] = value
    return cls(**kwargs)


def build_agent(algo: str, config: Any, device: str) -> common.Agent:
    if algo not in ALGORITHMS:
        raise RunError(f"algo: unknown algorithm {algo!r}; known: {', '.join(sorted(ALGORITHMS))}")
    return ALGORITHMS[algo][1](config, device=device)


def _read_run(out: Path) -> tuple[str, Any, dict[str, Any]]:
    path = out / CONFIG
    if not path.is_file():
        raise RunError(f"out: {out} holds no {CONFIG}; is it a funrl run folder?")
    try:
        meta = json.loads(path.read_text())
        algo = meta["algo"]
        cls = ALGORITHMS[algo][0]
        config = _config_from_json(cls, meta["config"])
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
    host: dict[str, torch.Tensor], last_update: int, steps_per_update: int, num_seeds: int
) -> list[dict]:
    count = next(iter(host.values())).shape[0]
    rows = []
    for u in range(count):
        update = last_update - count + u + 1
        for s in range(num_seeds):
            row = {"update": update, "seed": s, "env_steps": update * steps_per_update}
            for name, values in host.items():
                v = values[u] if values.dim() == 1 else values[u, s]
                row[name] = float(v)
            rows.append(row)
    return rows


def plot_learning_curve(out: Path, metric: str = "episode_return") -> Path | None:
    """Mean ± std over seeds of ``metric`` against env steps, from ``metrics.csv``; a PNG."""
    path = out / METRICS
    if not path.exists():
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_step: dict[int, list[float]] = {}
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            value = float(row[metric])
            if math.isfinite(value):
                by_step.setdefault(int(row["env_steps"]), []).append(value)
    if not by_step:
        return None
    steps = sorted(by_step)
    t = torch.tensor([by_step[s] for s in steps if len(by_step[s]) == len(by_step[steps[-1]])])
    xs = [s for s in steps if len(by_step[s]) == len(by_step[steps[-1]])]
    mean = t.mean(dim=1)
    std = t.std(dim=1, correction=0)
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    ax.plot(xs, mean.tolist(), color="C0")
    ax.fill_between(xs, (mean - std).tolist(), (mean + std).tolist(), color="C0", alpha=0.25)
    ax.set_xlabel("environment steps")
    ax.set_ylabel(f"{metric} (mean ± std over {t.shape[1]} seeds)")
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
) -> tuple[Any, dict[str, torch.Tensor]]:
    """Train (or resume) a run in ``out``; returns the final train state and this call's metrics.

    Metrics are brought to the host (and checked for non-finite values) every ``log_every``
    updates; a checkpoint is written at the first such point at least ``checkpoint_every``
    updates after the previous one, and at the end. ``stop_after`` stops after that many
    updates in total (for tests of interruption).
    """
    out = Path(out)
    if resume:
        algo, config, meta = _read_run(out)
        seed, num_seeds, device = meta["seed"], meta["num_seeds"], meta.get("device", device)
    else:
        if (out / CHECKPOINT).exists():
            raise RunError(
                f"out: {out} already holds a run; pass --resume to continue it or pick another --out"
            )
        out.mkdir(parents=True, exist_ok=True)
        meta = {
            "algo": algo,
            "config": _config_to_json(config),
            "seed": seed,
            "num_seeds": num_seeds,
            "device": device,
        }
        text = json.dumps(meta, indent=2)
        atomic_write_bytes(out / CONFIG, lambda f: f.write(text.encode()))
    agent = build_agent(algo, config, device)
    keys = common.seed_keys(seed, num_seeds)
    state, run_key = common.init_state(agent, keys)
    done = 0
    if resume:
        (state, run_key), ckpt_meta = load_checkpoint(out / CHECKPOINT, (state, run_key), device)
        done = int(ckpt_meta["update"])
        header = _truncate_metrics(out, done)
    else:
        header = None
    total = agent.num_updates if stop_after is None else min(stop_after, agent.num_updates)
    remaining = max(total - done, 0)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(
            total=agent.num_updates * agent.steps_per_update,
            initial=done * agent.steps_per_update,
            unit="step",
            unit_scale=True,
            dynamic_ncols=True,
            desc=f"{algo} {getattr(config, 'env_id', '')} x{num_seeds}",
        )
    last_saved = [done]
    header_box = [header]

    def on_log(update: int, state_and_key: Any, host: dict[str, torch.Tensor]) -> None:
        rows = _rows(host, update, agent.steps_per_update, num_seeds)
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
        if update - last_saved[0] >= checkpoint_every or update == total:
            save_checkpoint(out / CHECKPOINT, state_and_key, {"update": update, "algo": algo})
            last_saved[0] = update

    try:
        state, metrics = common.train(
            agent,
            keys,
            compile=compile,
            state=state,
            run_key=run_key,
            num_updates=remaining,
            callback=on_log,
            log_every=log_every,
        )
    finally:
        if bar is not None:
            bar.close()
    plot_learning_curve(out)
    return state, metrics


def evaluate_run(
    out: Path, episodes: int = 20, device: str | None = None, seed: int = 1_000_003
) -> dict[str, Any]:
    """Evaluate every seed's final checkpoint greedily for ``episodes`` episodes."""
    out = Path(out)
    algo, config, meta = _read_run(out)
    device = device or meta.get("device", "cpu")
    agent = build_agent(algo, config, device)
    keys = common.seed_keys(meta["seed"], meta["num_seeds"])
    template = common.init_state(agent, keys)
    try:
        (state, _), _ = load_checkpoint(out / CHECKPOINT, template, device)
    except CheckpointError as exc:
        raise RunError(str(exc)) from exc
    per_seed = []
    from funrl import random, tree

    for i, params in enumerate(tree.unstack(state.params)):
        returns = common.evaluate(agent, params, random.fold_in(random.key(seed), i), episodes)
        per_seed.append(float(returns.mean()))
    t = torch.tensor(per_seed)
    return {
        "mean_return": float(t.mean()),
        "std_return": float(t.std(correction=0)) if len(per_seed) > 1 else 0.0,
        "per_seed": per_seed,
    }
