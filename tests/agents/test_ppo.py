"""PPO agent: seeds and sweeps under vmap equal single runs, exact resume, clear failures."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from opt_states import learning_rates, with_learning_rate

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
    state_v, metrics_v = common.train(
        agent, keys, compile=False, num_updates=4, hparams={"learning_rate": lrs}
    )
    assert torch.equal(learning_rates(state_v.opt_state)[0], lrs)  # the rate rides in the optimiser state
    assert not tree.tree_allclose(tree.index(state_v.params, 0), tree.index(state_v.params, 1))
    for i in range(2):
        state_i, metrics_i = common.train(
            agent, keys[i], compile=False, num_updates=4, hparams={"learning_rate": float(lrs[i])}
        )
        assert tree.tree_allclose(tree.index(state_v.params, i), state_i.params, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(metrics_v["learning_rate"][:, i], metrics_i["learning_rate"])


def test_learning_rate_is_annealed_linearly_per_update(agent: common.Agent) -> None:
    """CleanRL's annealing: update ``i`` (from 0) of ``n`` steps with ``lr * (1 - i / n)``, the same
    rate for each of its minibatch steps; the base rate in the state does not change."""
    state, metrics = common.train(agent, random.key(1), compile=False, num_updates=3)
    n = TINY.num_updates
    expected = torch.tensor([TINY.learning_rate * (1 - i / n) for i in range(3)])
    torch.testing.assert_close(metrics["learning_rate"], expected)
    assert float(ppo.learning_rate(state)) == pytest.approx(TINY.learning_rate)
    # The steps follow the annealed rate: the first update (factor 1) equals one without annealing,
    # the second (factor 1 - 1/n) does not.
    constant = ppo.make_train(ppo.PPOConfig(**{**TINY.__dict__, "anneal_lr": False}))
    for updates, same in ((1, True), (2, False)):
        annealed, _ = common.train(agent, random.key(1), compile=False, num_updates=updates)
        plain, _ = common.train(constant, random.key(1), compile=False, num_updates=updates)
        assert tree.tree_equal(annealed.params, plain.params) is same, updates


def test_unknown_hyper_parameter_is_refused(agent: common.Agent) -> None:
    with pytest.raises(ValueError, match=r"hparams: unknown \['lr'\]; sweepable: \['learning_rate'"):
        common.train(agent, random.key(0), compile=False, num_updates=1, hparams={"lr": 1e-3})


def test_non_finite_loss_names_update_seed_and_term(tmp_path: Path) -> None:
    agent, state, run_key = _two_seed_checkpoint(tmp_path / "run")
    # Plant the bug: a NaN learning rate in seed 1 only.
    state = state._replace(
        opt_state=with_learning_rate(state.opt_state, torch.tensor([2.5e-4, float("nan")]))
    )
    with pytest.raises(common.NonFiniteError, match=r"non-finite \w+ \(nan\) at update 3, seed 1"):
        common.train(
            agent, common.seed_keys(0, 2), compile=False, state=state, run_key=run_key, num_updates=4
        )


def _two_seed_checkpoint(out: Path) -> tuple[common.Agent, ppo.PPOTrainState, torch.Tensor]:
    run.train_run(
        "ppo", TINY, out, num_seeds=2, compile=False, checkpoint_every=2, progress=False, stop_after=2
    )
    agent = ppo.make_train(TINY)
    (state, run_key), _ = load_checkpoint(
        out / run.CHECKPOINT, common.init_state(agent, common.seed_keys(0, 2))
    )
    return agent, state, run_key


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
        "    if update >= 6:\n"
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
    rows = (out / run.METRICS).read_text().splitlines()
    killed_at = int(rows[-1].split(",")[0])  # the first log point at or past update 6
    assert 4 <= meta["update"] < killed_at  # a checkpoint before the kill, rows past it to redo
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
