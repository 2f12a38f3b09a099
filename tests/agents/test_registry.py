"""Agents are pluggable: one ``register_agent`` call gives the CLI's choices, help and ``--lr``,
evaluation and the non-finite check; every agent refuses unknown hyper-parameters alike."""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch

from funrl import random
from funrl.__main__ import build_parser, config_from_args, main
from funrl.agents import common, get_agent, register_agent, registered_agents, registry

BUILTIN = ("dqn", "ppo", "sac", "td3")


@pytest.fixture
def toy() -> Iterator[ModuleType]:
    """``tests/agents/toy_agent.py`` imported (which registers ``toy``), unregistered afterwards."""
    module = importlib.import_module("toy_agent")
    assert "toy" in registered_agents()
    yield module
    registry._AGENTS.pop("toy")
    sys.modules.pop("toy_agent")


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def test_the_builtin_agents_are_registered() -> None:
    assert set(BUILTIN) <= set(registered_agents())
    for name in BUILTIN:
        assert get_agent(name).name == name
    with pytest.raises(ValueError, match=r"algo: unknown algorithm 'dqnx'; known: dqn, ippo, mappo, ppo, sac, td3"):
        get_agent("dqnx")


def test_a_new_agent_file_is_all_the_cli_needs(
    toy: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "1000")
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    help_text = capsys.readouterr().out
    assert "toy (REINFORCE on one-step returns, a test agent)" in help_text
    args = build_parser().parse_args(["train", "toy", "--lr", "0.5", "--total-steps", "64"])
    assert config_from_args(args) == ("toy", toy.ToyConfig(total_steps=64, learning_rate=0.5))

    out = tmp_path / "toy"
    base = ["train", "toy", "--total-steps", "64", "--seeds", "2", "--no-compile", "--no-progress"]
    assert main([*base, "--out", str(out)]) == 0, capsys.readouterr().err
    assert json.loads((out / "config.json").read_text())["algo"] == "toy"
    capsys.readouterr()
    assert main(["eval", str(out), "--episodes", "2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert len(result["per_seed"]) == 2 and result["mean_return"] >= 1.0  # CartPole: at least a step


def test_every_metric_is_checked_unless_the_agent_declares_it_may_be_nan(
    toy: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``spread`` is NaN with one step per rollout: a metric no list of loss terms names, so only a
    check of every metric stops the run; declared in ``may_be_nan``, it trains through."""
    config = toy.ToyConfig(num_steps=1, total_steps=8)
    agent = toy.make_train(config)
    with pytest.raises(common.NonFiniteError, match=r"non-finite spread \(nan\) at update 1, seed 0"):
        common.train(agent, random.key(0), compile=False)
    spec = get_agent("toy")
    monkeypatch.setitem(
        registry._AGENTS, "toy", dataclasses.replace(spec, may_be_nan=spec.may_be_nan | {"spread"})
    )
    _, metrics = common.train(agent, random.key(0), compile=False)
    assert metrics["spread"].isnan().all() and metrics["loss"].isfinite().all()


def test_episode_return_may_be_nan_for_every_agent() -> None:
    for name, spec in registered_agents().items():
        assert "episode_return" in spec.may_be_nan, name
    assert registry.may_be_nan("not-registered") == registry.MAY_BE_NAN == {"episode_return"}


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"name": "ppo"}, r"name: 'ppo' is already registered"),
        ({"name": "two words"}, r"name: expected an identifier"),
        ({"config_type": dict}, r"config_type: expected a dataclass type"),
        ({"action_spaces": ("pixels",)}, r"action_spaces: expected a non-empty subset"),
        ({"learning_rates": ("lr",)}, r"learning_rates: expected fields of ToyConfig, got \['lr'\]"),
    ],
)
def test_register_agent_refuses_bad_records(toy: ModuleType, kwargs: dict, fragment: str) -> None:
    record = {
        "name": "toy2",
        "config_type": toy.ToyConfig,
        "make_train": toy.make_train,
        "summary": "s",
        "action_spaces": ("discrete",),
        "learning_rates": ("learning_rate",),
        **kwargs,
    }
    name = record.pop("name")
    config_type = record.pop("config_type")
    make_train = record.pop("make_train")
    with pytest.raises(ValueError, match=fragment):
        register_agent(name, config_type, make_train, **record)
    assert "toy2" not in registered_agents()


@pytest.mark.parametrize("algo", BUILTIN)
def test_unknown_hyper_parameter_raises_for_every_agent(algo: str) -> None:
    spec = get_agent(algo)
    agent = spec.make_train(spec.config_type(env_id=_env_for(spec), total_steps=1_000))
    with pytest.raises(ValueError, match=r"hparams: unknown \['lr'\]; sweepable: \["):
        common.train(agent, random.key(0), compile=False, num_updates=1, hparams={"lr": 1e-3})


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
    spec = get_agent(algo)
    env = _env_for(spec)
    args = build_parser().parse_args(
        ["train", algo, "--env", env, "--total-steps", "100000", "--lr", "0.0123"]
    )
    name, config = config_from_args(args)
    assert name == algo and config.env_id == env and config.total_steps == 100_000
    assert spec.learning_rates == fields
    assert all(getattr(config, field) == 0.0123 for field in fields)


@pytest.mark.parametrize("algo", BUILTIN)
def test_declared_action_spaces_are_the_ones_the_agent_trains_on(algo: str) -> None:
    spec = get_agent(algo)
    for space, env_id in (("discrete", "CartPole-v1"), ("continuous", "Pendulum-v1")):
        config = spec.config_type(env_id=env_id, total_steps=1_000)
        if space in spec.action_spaces:
            assert spec.make_train(config).name == algo
        else:
            with pytest.raises(ValueError, match=rf"env_id: .*{env_id}"):
                spec.make_train(config)


def _env_for(spec: registry.AgentSpec) -> str:
    return "CartPole-v1" if "discrete" in spec.action_spaces else "Pendulum-v1"


def test_check_finite_lets_a_breakdown_be_nan_where_its_metric_may():
    nan = torch.tensor([float("nan")])
    common.check_finite({"episode_return/adversary": nan}, 1, frozenset({"episode_return"}))
    with pytest.raises(common.NonFiniteError, match=r"non-finite loss/actor \(nan\) at update 1"):
        common.check_finite({"loss/actor": nan}, 1, frozenset({"episode_return"}))
