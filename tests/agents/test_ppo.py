"""PPO agent: seeds and sweeps under vmap equal single runs, exact resume, clear failures, the CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from funrl import random, tree
from funrl.agents import common, ppo, run
from funrl.agents.checkpoint import CheckpointError, load_checkpoint, save_checkpoint

TINY = ppo.PPOConfig(
    env_id="CartPole-v1",
    total_steps=2 * 8 * 12,
    num_envs=2,
    num_steps=8,
    update_epochs=2,
    num_minibatches=2,
    hidden_sizes=(16, 16),
)


@pytest.fixture(scope="module")
def agent() -> common.Agent:
    return ppo.make_train(TINY)


def test_config_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="num_minibatches"):
        ppo.PPOConfig(num_envs=3, num_steps=5, num_minibatches=4)
    with pytest.raises(ValueError, match="gamma"):
        ppo.PPOConfig(gamma=1.5)
    with pytest.raises(ValueError, match="total_steps"):
        ppo.PPOConfig(total_steps=10)


def test_update_is_pure(agent: common.Agent) -> None:
    state, run_key = common.init_state(agent, random.key(3))
    before = tree.map(torch.clone, state)
    key = random.fold_in(run_key, 0)
    a, metrics_a = agent.update(state, key)
    b, metrics_b = agent.update(state, key)
    assert tree.tree_equal(state, before), "update mutated its input state"
    assert tree.tree_equal(a, b)
    assert tree.tree_equal(metrics_a, metrics_b)
    assert int(a.update_count) == 1


def test_vmapped_seeds_equal_single_runs(agent: common.Agent) -> None:
    keys = common.seed_keys(0, 3)
    state_v, metrics_v = common.train(agent, keys, compile=False, num_updates=10)
    for i in range(3):
        state_i, metrics_i = common.train(agent, keys[i], compile=False, num_updates=10)
        assert tree.tree_allclose(tree.index(state_v.params, i), state_i.params, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(metrics_v["loss"][:, i], metrics_i["loss"], rtol=1e-4, atol=1e-5)


def test_learning_rate_sweep_equals_single_runs(agent: common.Agent) -> None:
    keys = torch.stack([random.key(7)] * 2)
    lrs = torch.tensor([1e-3, 1e-4])
    state_v, _ = common.train(agent, keys, compile=False, num_updates=4, hparams={"learning_rate": lrs})
    assert not tree.tree_allclose(tree.index(state_v.params, 0), tree.index(state_v.params, 1))
    for i in range(2):
        state_i, _ = common.train(
            agent, keys[i], compile=False, num_updates=4, hparams={"learning_rate": float(lrs[i])}
        )
        assert tree.tree_allclose(tree.index(state_v.params, i), state_i.params, rtol=1e-5, atol=1e-6)


def test_non_finite_loss_names_update_seed_and_term(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run.train_run(
        "ppo", TINY, out, num_seeds=2, compile=False, checkpoint_every=2, progress=False, stop_after=2
    )
    good, _ = load_checkpoint(
        out / run.CHECKPOINT, common.init_state(ppo.make_train(TINY), common.seed_keys(0, 2))
    )
    agent = ppo.make_train(TINY)
    state, run_key = good
    # Plant the bug: a NaN learning rate in seed 1 only.
    state = state._replace(hparams=state.hparams._replace(learning_rate=torch.tensor([2.5e-4, float("nan")])))
    with pytest.raises(common.NonFiniteError, match=r"at update 3, seed 1") as info:
        common.train(
            agent, common.seed_keys(0, 2), compile=False, state=state, run_key=run_key, num_updates=4
        )
    assert any(term in str(info.value) for term in common.LOSS_TERMS)
    still, meta = load_checkpoint(out / run.CHECKPOINT, good)
    assert meta["update"] == 2 and tree.tree_equal(still, good)


def test_resume_is_bitwise_exact(tmp_path: Path) -> None:
    full, _ = run.train_run("ppo", TINY, tmp_path / "full", compile=False, progress=False, checkpoint_every=4)
    part = tmp_path / "part"
    run.train_run("ppo", TINY, part, compile=False, progress=False, checkpoint_every=4, stop_after=5)
    meta = json.loads((part / run.CONFIG).read_text())
    assert meta["algo"] == "ppo"
    resumed, _ = run.train_run(
        "ppo", None, part, resume=True, compile=False, progress=False, checkpoint_every=4
    )
    assert tree.tree_equal(resumed.params, full.params)
    assert tree.tree_equal(resumed.opt_state, full.opt_state)
    rows = (part / run.METRICS).read_text().splitlines()
    assert len(rows) == 1 + TINY.num_updates  # no duplicated rows for updates redone after the checkpoint
    assert rows[1:] == (tmp_path / "full" / run.METRICS).read_text().splitlines()[1:]


def test_resume_after_sigkill(tmp_path: Path) -> None:
    full, _ = run.train_run("ppo", TINY, tmp_path / "full", compile=False, progress=False)
    out = tmp_path / "killed"
    script = (
        "import os, signal\n"
        "from funrl.agents import run, ppo, common\n"
        f"cfg = ppo.PPOConfig(**{run._config_to_json(TINY)!r})\n"
        "cfg = ppo.PPOConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in cfg.__dict__.items()})\n"
        "def kill(update, *_):\n"
        "    if update == 6:\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "orig = common.train\n"
        "def train(*a, callback=None, **k):\n"
        "    def both(u, s, h):\n"
        "        callback(u, s, h); kill(u)\n"
        "    return orig(*a, callback=both, **k)\n"
        "run.common.train = train\n"
        f"run.train_run('ppo', cfg, {str(out)!r}, compile=False, progress=False, checkpoint_every=4, log_every=2)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    _, meta = load_checkpoint(
        out / run.CHECKPOINT, common.init_state(ppo.make_train(TINY), common.seed_keys(0, 1))
    )
    assert meta["update"] == 4  # the last checkpoint before the kill at update 6
    resumed, _ = run.train_run(
        "ppo", None, out, resume=True, compile=False, progress=False, checkpoint_every=4
    )
    assert tree.tree_equal(resumed.params, full.params)


def test_corrupted_and_foreign_checkpoints_are_clear_errors(tmp_path: Path) -> None:
    agent = ppo.make_train(TINY)
    template = common.init_state(agent, random.key(0))
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, template, {"update": 0})
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="corrupted or truncated"):
        load_checkpoint(path, template)
    torch.save({"weights": torch.zeros(3)}, path)
    with pytest.raises(CheckpointError, match="not a funrl-checkpoint"):
        load_checkpoint(path, template)
    save_checkpoint(path, {"a": torch.zeros(2)}, {})
    with pytest.raises(CheckpointError, match="structure"):
        load_checkpoint(path, template)


def test_atomic_checkpoint_keeps_old_file_when_write_fails(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, {"a": torch.ones(2)}, {"update": 1})
    with pytest.raises(TypeError):
        save_checkpoint(path, {"a": "not a tensor"}, {"update": 2})
    state, meta = load_checkpoint(path, {"a": torch.zeros(2)})
    assert meta["update"] == 1 and torch.equal(state["a"], torch.ones(2))
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run(
        [sys.executable, "-m", "funrl", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=600
    )


def test_cli_help_documents_every_option(tmp_path: Path) -> None:
    proc = _cli("train", "--help", cwd=tmp_path)
    assert proc.returncode == 0
    for option in ("--env", "--total-steps", "--seeds", "--device", "--out", "--resume", "(default:"):
        assert option in proc.stdout


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["train", "ppo", "--total-steps", "-5"], "--total-steps"),
        (["train", "ppo", "--env", "NoSuchEnv-v0", "--total-steps", "1000"], "NoSuchEnv-v0"),
        (["train", "dqnx"], "unknown"),
        (["eval", "does-not-exist"], "config.json"),
    ],
)
def test_cli_bad_option_is_one_line_error(tmp_path: Path, args: list[str], fragment: str) -> None:
    proc = _cli(*args, cwd=tmp_path)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert fragment in proc.stderr
    assert len([line for line in proc.stderr.splitlines() if "error" in line]) == 1


@pytest.mark.slow
def test_cli_train_then_eval(tmp_path: Path) -> None:
    out = tmp_path / "runs" / "tiny"
    proc = _cli(
        "train", "ppo", "--env", "CartPole-v1", "--total-steps", "2048", "--seeds", "2",
        "--no-compile", "--out", str(out), "--no-progress", "--checkpoint-every", "2",
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    for name in (run.CONFIG, run.METRICS, run.CHECKPOINT, run.PLOT):
        assert (out / name).is_file(), name
    header = (out / run.METRICS).read_text().splitlines()[0].split(",")
    assert {"update", "seed", "env_steps", "episode_return", "loss"} <= set(header)
    proc = _cli("eval", str(out), "--episodes", "3", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(result) == {"mean_return", "std_return", "per_seed"}
    assert len(result["per_seed"]) == 2 and all(r >= 1.0 for r in result["per_seed"])


@pytest.mark.slow
def test_compiled_update_equals_eager(agent: common.Agent) -> None:
    """One compiled graph for the whole PPO iteration (rollout scan, GAE, minibatch scan), with
    inductor's Python wrapper (the C++ wrapper, ``funrl train``'s default for PPO on a CPU, is
    compiled by the vmapped test below: one cold compile of this step costs ~2 minutes of CI)."""
    state, run_key = common.init_state(agent, random.key(11))
    eager_step = common.make_step(agent, batched=False, compile=False)
    compiled_step = common.make_step(agent, batched=False, compile=True)
    eager, compiled = state, state
    for _ in range(3):
        eager, metrics_e = eager_step(eager, run_key)
        compiled, metrics_c = compiled_step(compiled, run_key)
    assert tree.tree_allclose(compiled.params, eager.params, rtol=1e-5, atol=1e-6)
    assert tree.tree_equal(compiled.env_state, eager.env_state) or tree.tree_allclose(
        compiled.env_state, eager.env_state, rtol=1e-5, atol=1e-6
    )
    torch.testing.assert_close(metrics_c["loss"], metrics_e["loss"], rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_vmapped_update_compiles_with_the_cpp_wrapper_and_equals_eager(agent: common.Agent) -> None:
    """Two seeds vmapped, compiled with inductor's C++ wrapper built as two files (``funrl train``'s
    default for PPO on a CPU): runs (torch 2.13 crashed here while the minibatch loop closed over
    the per-seed hyper-parameters) and equals the eager step."""
    state, run_key = common.init_state(agent, common.seed_keys(5, 2))
    eager_step = common.make_step(agent, batched=True, compile=False)
    compiled_step = common.make_step(agent, batched=True, compile=True, options={"cpp_wrapper": True})
    eager, compiled = state, state
    for _ in range(3):
        eager, metrics_e = eager_step(eager, run_key)
        compiled, metrics_c = compiled_step(compiled, run_key)
    assert tree.tree_allclose(compiled.params, eager.params, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(metrics_c["loss"], metrics_e["loss"], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "algo, fields",
    [
        ("ppo", ("learning_rate",)),
        ("dqn", ("learning_rate",)),
        ("sac", ("policy_lr", "q_lr")),
        ("td3", ("learning_rate",)),
    ],
)
def test_cli_lr_sets_every_learning_rate_of_the_algorithm(algo: str, fields: tuple[str, ...]) -> None:
    from funrl.__main__ import build_parser, config_from_args

    env = "CartPole-v1" if algo in ("ppo", "dqn") else "Pendulum-v1"
    args = build_parser().parse_args(
        ["train", algo, "--env", env, "--total-steps", "100000", "--lr", "0.0123"]
    )
    name, config = config_from_args(args)
    assert name == algo and config.env_id == env
    assert all(getattr(config, f) == 0.0123 for f in fields)
