"""Every env id of ``funrl.envs.registry()`` with every agent of its action space, through the CLI
(``funrl train ... --no-compile``, then ``funrl eval``), on the smallest budget: the agents' default
networks take every observation the registry has (MinAtar's bool frames, bsuite's grids)."""

from __future__ import annotations

import json
from pathlib import Path

import point_env
import pytest

from funrl import envs
from funrl.__main__ import main
from funrl.agents import registered_agents, run

# One update each: PPO's 128-step rollout of one env; the off-policy agents' default update steps
# every env once (DQN's ten, SAC's and TD3's one), here twice. Replay warm-up keeps them acting
# uniformly, but the gradient steps run (masked) all the same.
BUDGET = {"ppo": ["--num-envs", "1", "--total-steps", "128"], "dqn": ["--total-steps", "20"]}
OFF_POLICY_BUDGET = ["--total-steps", "2"]


def _action_space(env_id: str) -> str:
    env, params = envs.make(env_id)
    return "continuous" if isinstance(env.action_space(params), envs.Box) else "discrete"


# funrl's own ids: the registry without the test suite's PointMass (imported here, so registered
# whichever test file is collected first).
ENV_IDS = [env_id for env_id in envs.registry() if env_id != point_env.ENV_ID]
MULTI_AGENT = {"ippo", "mappo"}  # they train on funrl.envs.marl ids: tests/agents/test_marl_agents.py

CASES = [
    (env_id, algo)
    for env_id in ENV_IDS
    for algo, spec in registered_agents().items()
    if _action_space(env_id) in spec.action_spaces and algo not in MULTI_AGENT
]


def test_the_matrix_covers_every_env_id_and_agent() -> None:
    assert {env_id for env_id, _ in CASES} == set(ENV_IDS) and len(ENV_IDS) >= 12
    assert {algo for _, algo in CASES} >= {"ppo", "dqn", "sac", "td3"}


@pytest.mark.parametrize("env_id, algo", CASES)
def test_train_and_eval_eagerly_through_the_cli(
    env_id: str, algo: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    budget = BUDGET.get(algo, OFF_POLICY_BUDGET)
    args = ["train", algo, "--env", env_id, *budget, "--no-compile", "--no-progress", "--out", str(out)]
    assert main(args) == 0, capsys.readouterr().err
    assert (out / run.CHECKPOINT).is_file() and (out / run.METRICS).is_file()
    capsys.readouterr()
    assert main(["eval", str(out), "--episodes", "1", "--json"]) == 0, capsys.readouterr().err
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert len(result["per_seed"]) == 1 and result["per_seed"][0] == result["mean_return"]
