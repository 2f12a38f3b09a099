"""IPPO and MAPPO: every team's own networks over packed tensors, agents as a vmap axis, seeds
under vmap equal single runs, compiled equals eager, every scenario and action variant through
the CLI (one fresh process per scenario), clear errors, and learning on simple_spread and
simple_adversary."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import torch
from batch_steps import check_batch_steps_as_each_env_alone

from funrl import envs, nets, random, tree
from funrl.__main__ import main as cli_main
from funrl.agents import common, mappo, run
from funrl.envs import marl
from funrl.envs.marl import MultiAgentEnv
from funrl.testing import assert_trees_close

TINY = mappo.MAPPOConfig(
    env_id="mpe:simple_spread",
    total_steps=2 * 8 * 6,
    num_envs=2,
    num_steps=8,
    update_epochs=2,
    num_minibatches=2,
    hidden_sizes=(16, 16),
)


@pytest.fixture(scope="module")
def agent() -> common.Agent:
    return mappo.make_train(TINY)


# -- configuration and environment errors --------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"total_steps": 10}, r"total_steps: expected at least num_envs \* num_steps = 400, got 10"),
        ({"gamma": 1.5}, r"gamma: expected a value in \[0, 1\], got 1.5"),
        ({"num_envs": 0}, r"num_envs: expected a positive int, got 0"),
        ({"num_envs": 1}, r"num_minibatches: expected a divisor of num_envs \* num_steps = 25, got 2"),
        ({"share_params": "yes"}, r"share_params: expected a bool, got 'yes'"),
        ({"learning_rate": 0.0}, r"learning_rate: expected a value > 0, got 0.0"),
    ],
)
def test_config_rejects_bad_values(kwargs: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        mappo.MAPPOConfig(**kwargs)


def test_a_single_agent_env_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"env_id: IPPO/MAPPO train multi-agent envs, .*got 'CartPole-v1'"):
        mappo.make_train(dataclasses.replace(TINY, env_id="CartPole-v1"))
    single, _ = envs.make("CartPole-v1")
    with pytest.raises(TypeError, match=r"env: expected a multi-agent env .*got CartPole"):
        mappo.make_train(TINY, env=single)


def test_unknown_hyperparameter_is_a_clear_error(agent: common.Agent) -> None:
    with pytest.raises(ValueError, match=r"hparams: unknown \['lr'\]; sweepable: \['learning_rate'"):
        agent.init(random.key(0), lr=1e-3)


# -- agents as a vmap axis -------------------------------------------------------------------


def test_shared_params_have_one_set_and_independent_params_one_per_agent() -> None:
    shared = mappo.make_train(TINY).init(random.key(0))
    independent = mappo.make_train(dataclasses.replace(TINY, share_params=False)).init(random.key(0))
    obs_dim, state_dim, agents = 18, 54, 3
    assert shared.params["agent"]["actor"]["mlp.0.weight"].shape == (16, obs_dim)
    # The centralised critic sees the global state and a one-hot agent id.
    assert shared.params["agent"]["critic"]["0.weight"].shape == (16, state_dim + agents)
    for net in ("actor", "critic"):
        for name, leaf in shared.params["agent"][net].items():
            assert independent.params["agent"][net][name].shape == (agents, *leaf.shape)
    first, second = (tree.index(independent.params, i) for i in (0, 1))
    assert not torch.equal(first["agent"]["actor"]["mlp.0.weight"], second["agent"]["actor"]["mlp.0.weight"])
    ippo = mappo.make_train(dataclasses.replace(TINY, centralised_critic=False)).init(random.key(0))
    assert ippo.params["agent"]["critic"]["0.weight"].shape == (16, obs_dim)  # each agent's own observation


def test_every_team_has_its_own_actor_critic_and_optimisers() -> None:
    config = dataclasses.replace(TINY, env_id="mpe:simple_tag")
    shared = mappo.make_train(config).init(random.key(0))
    independent = mappo.make_train(dataclasses.replace(config, share_params=False)).init(random.key(0))
    state_dim = 3 * 16 + 14
    for team, agents, obs_dim in (("adversary", 3, 16), ("agent", 1, 14)):
        assert shared.params[team]["actor"]["mlp.0.weight"].shape == (16, obs_dim)
        assert shared.params[team]["critic"]["0.weight"].shape == (16, state_dim + agents)
        assert independent.params[team]["actor"]["mlp.0.weight"].shape == (agents, 16, obs_dim)
        assert set(shared.opt_state[team]) == {"actor", "critic"}
    assert not torch.equal(
        shared.params["adversary"]["actor"]["mlp.2.weight"], shared.params["agent"]["actor"]["mlp.2.weight"]
    )
    ippo = mappo.make_train(dataclasses.replace(config, centralised_critic=False)).init(random.key(0))
    assert ippo.params["agent"]["critic"]["0.weight"].shape == (16, 14)


@pytest.mark.parametrize(
    "env_id, share_params",
    [("mpe:simple_tag", True), ("mpe:simple_tag", False), ("mpe:simple_speaker_listener_continuous", False)],
)
def test_greedy_action_of_every_team_equals_a_loop_over_its_agents(env_id: str, share_params: bool) -> None:
    agent = mappo.make_train(dataclasses.replace(TINY, env_id=env_id, share_params=share_params))
    state = agent.init(random.key(1))
    teams_env = agent.env.env
    expected = {}
    for team in teams_env.teams:
        space = team.action_space
        if teams_env.continuous:
            actor = nets.GaussianActor(team.obs_dim, space.shape[0], TINY.hidden_sizes)
        else:
            actor = nets.DiscreteActor(team.obs_dim, space.n, TINY.hidden_sizes)
        obs = team.split_obs(state.obs)  # [N, A_team, D_team]
        per_agent = []
        for i in range(team.num_agents):
            params = state.params[team.name]["actor"]
            params = params if share_params else tree.index(params, i)
            out = nets.apply(actor, params, obs[:, i])
            per_agent.append(out[0] if teams_env.continuous else out.argmax(-1))  # the mean, or the mode
        expected[team.name] = torch.stack(per_agent, 1)
    torch.testing.assert_close(agent.greedy_action(state.params, state.obs), teams_env.pack_actions(expected))


@pytest.mark.parametrize(
    "env_id, entropy",
    [
        ("mpe:simple_push", lambda: math.log(5)),
        # A unit-variance Gaussian over 5 action values: 5 * (1/2 + log(2 pi)/2).
        ("mpe:simple_push_continuous", lambda: 5 * (0.5 + 0.5 * math.log(2 * math.pi))),
    ],
)
def test_the_action_space_picks_a_categorical_or_a_gaussian_actor(env_id: str, entropy: Any) -> None:
    """One small gradient step from init: the policies' entropy is still the initial one, nearly
    uniform logits or the Gaussian's unit scale (log-std 0), and every team's loss sees the
    log-probs its agents acted with (ratio 1 at the rollout's params)."""
    config = dataclasses.replace(TINY, env_id=env_id, update_epochs=1, num_minibatches=1, learning_rate=1e-5)
    agent = mappo.make_train(config)
    state = agent.init(random.key(0))
    new_state, metrics = agent.update(state, random.key(1))
    assert float(metrics["entropy"]) == pytest.approx(entropy(), abs=0.01)
    assert float(metrics["ratio_mean"]) == pytest.approx(1.0, abs=1e-5)
    assert float(metrics["clip_fraction"]) == 0.0
    actions = agent.greedy_action(state.params, state.obs)
    assert actions.dtype == (torch.float32 if "continuous" in env_id else torch.int64)
    if "continuous" in env_id:
        assert torch.equal(state.params["agent"]["actor"]["log_std"], torch.zeros(5))
        assert not torch.equal(new_state.params["agent"]["actor"]["log_std"], torch.zeros(5))


def test_update_is_pure(agent: common.Agent) -> None:
    state, run_key = common.init_state(agent, random.key(3))
    before = tree.map(torch.clone, state)
    key = random.fold_in(run_key, 0)
    a, metrics_a = agent.update(state, key)
    b, metrics_b = agent.update(state, key)
    assert tree.tree_equal(state, before), "update mutated its input state"
    assert tree.tree_equal(a, b) and tree.tree_equal(metrics_a, metrics_b)
    assert int(a.update_count) == 1 and a.obs.shape == (2, 3 * 18)


@pytest.mark.parametrize(
    "env_id, share_params",
    [("mpe:simple_spread", True), ("mpe:simple_spread", False), ("mpe:simple_push_continuous", False)],
)
def test_vmapped_seeds_equal_single_runs(env_id: str, share_params: bool) -> None:
    agent = mappo.make_train(dataclasses.replace(TINY, env_id=env_id, share_params=share_params))
    keys = common.seed_keys(0, 2)
    state_v, metrics_v = common.train(agent, keys, compile=False, num_updates=3)
    for i in range(2):
        state_i, metrics_i = common.train(agent, keys[i], compile=False, num_updates=3)
        assert_trees_close(tree.index(state_v.params, i), state_i.params, rtol=1e-5, atol=1e-5)
        for name in ("loss", "value_loss", *(k for k in metrics_i if k.startswith("episode_return"))):
            torch.testing.assert_close(
                metrics_v[name][:, i], metrics_i[name], rtol=1e-4, atol=1e-5, equal_nan=True
            )


def test_learning_rate_sweep_equals_single_runs(agent: common.Agent) -> None:
    keys = torch.stack([random.key(7)] * 2)
    lrs = torch.tensor([1e-3, 1e-4])
    state_v, metrics_v = common.train(
        agent, keys, compile=False, num_updates=2, hparams={"learning_rate": lrs}
    )
    for i in range(2):
        state_i, _ = common.train(
            agent, keys[i], compile=False, num_updates=2, hparams={"learning_rate": float(lrs[i])}
        )
        assert_trees_close(tree.index(state_v.params, i), state_i.params, rtol=1e-5, atol=1e-6)
    assert not tree.tree_allclose(tree.index(state_v.params, 0), tree.index(state_v.params, 1))


# -- the team view: episode statistics and evaluation ------------------------------------------


def test_teams_env_packs_every_team_in_agent_order_and_sums_each_agents_episode() -> None:
    env, params = mappo.make_teams_env("mpe:simple_tag", {})
    adversary, agent = env.teams
    assert (adversary.name, adversary.num_agents, adversary.obs_dim) == ("adversary", 3, 16)
    assert adversary.agents == slice(0, 3)
    assert (agent.name, agent.num_agents, agent.obs_dim, agent.agents) == ("agent", 1, 14, slice(3, 4))
    obs, state = env.reset(random.key(0), params)
    ref_obs, ref_state = env.env.reset(random.key(0), params)
    assert obs.shape == (3 * 16 + 14,)
    assert torch.equal(adversary.split_obs(obs), ref_obs["adversary"])
    assert torch.equal(agent.split_obs(obs), ref_obs["agent"])
    per_agent = torch.zeros(4)
    for t in range(25):
        action = random.randint(random.fold_in(random.key(1), t), (4,), 0, 5)
        key = random.fold_in(random.key(2), t)
        obs, state, reward, terminated, truncated, info = env.step(key, state, action, params)
        ref_obs, ref_state, ref_reward, *_ = env.env.step(
            key, ref_state, {"adversary": action[:3], "agent": action[3:]}, params
        )
        assert torch.equal(obs, torch.cat([ref_obs["adversary"].flatten(), ref_obs["agent"].flatten()]))
        assert torch.equal(reward, torch.cat([ref_reward["adversary"], ref_reward["agent"]]))
        assert terminated.shape == truncated.shape == (4,) and info["global_state"].shape == (62,)
        per_agent += reward
        assert bool(info["returned_episode"]) == (t == 24)
    torch.testing.assert_close(info["returned_agent_returns"], per_agent)
    torch.testing.assert_close(info["returned_episode_return"], per_agent.sum())
    assert int(info["returned_episode_length"]) == 25 and not bool(state.episode_return.any())


@pytest.mark.parametrize("env_id", ["mpe:simple_tag", "mpe:simple_speaker_listener_continuous"])
def test_the_teams_env_steps_a_batch_as_it_is_and_equals_each_env_alone(env_id: str) -> None:
    # Batch-polymorphic like its scenario: funrl.envs.vmap calls step_with on the whole batch, and
    # the episode statistics stay per env (the envs start 0, 1 and 2 steps into 3-step episodes,
    # so each ends its episodes at other steps).
    env, params = mappo.make_teams_env(env_id, {"max_cycles": 3})
    assert env.batch_polymorphic
    num_envs, key = 3, random.key(4)
    batched = envs.vmap(env, num_envs)
    _, state = batched.reset(key, params)
    state = state._replace(env_state=state.env_state._replace(time=torch.arange(3, dtype=torch.int32)))
    returned = check_batch_steps_as_each_env_alone(env, batched, state, params, key, steps=5)
    assert all(int(r.sum()) <= 1 for r in returned)  # never two envs at once
    assert bool(torch.stack(returned).any(0).all())


def test_continuous_teams_pack_each_agents_action_vector() -> None:
    env, _ = mappo.make_teams_env("mpe:simple_speaker_listener_continuous", {})
    speaker, listener = env.teams
    assert speaker.action_space.shape == (3,) and listener.action_space.shape == (5,)
    space = env.action_space()
    assert space.shape == (8,) and space.dtype == torch.float32
    actions = {"speaker": torch.rand(2, 1, 3), "listener": torch.rand(2, 1, 5)}
    packed = env.pack_actions(actions)
    assert packed.shape == (2, 8)
    assert torch.equal(speaker.split_actions(packed), actions["speaker"])
    assert torch.equal(listener.split_actions(packed), actions["listener"])
    with pytest.raises(ValueError, match=r"action: expected shape \[8\] .*got \[7\]"):
        env.step(random.key(0), env.reset(random.key(0), env.default_params)[1], torch.rand(7))


def test_evaluate_runs_one_fresh_env_per_episode(agent: common.Agent) -> None:
    state = agent.init(random.key(0))
    returns = common.evaluate(agent, state.params, random.key(5), episodes=3)
    assert returns.shape == (3,) and bool(torch.isfinite(returns).all())
    assert bool((returns < 0).all())  # simple_spread's rewards are distances and collisions


def test_each_teams_return_is_reported_and_they_sum_to_the_episode_return() -> None:
    config = dataclasses.replace(TINY, env_id="mpe:simple_tag", num_steps=25, total_steps=50)
    agent = mappo.make_train(config)
    state, metrics = agent.update(agent.init(random.key(0)), random.key(1))
    assert int(metrics["episodes"]) == 2  # each env ended one 25-step episode
    torch.testing.assert_close(
        metrics["episode_return/adversary"] + metrics["episode_return/agent"], metrics["episode_return"]
    )
    assert float(metrics["episode_return/adversary"]) >= 0.0  # catches only, never a penalty
    key = random.key(5)
    teams = mappo.evaluate_teams(agent, mappo.greedy_policy(agent, state.params), key, episodes=3)
    assert set(teams) == {"adversary", "agent"} and teams["agent"].shape == (3,)
    total = common.evaluate(agent, state.params, key, episodes=3)
    torch.testing.assert_close(teams["adversary"] + teams["agent"], total)
    uniform = mappo.evaluate_teams(agent, mappo.uniform_policy(agent), key, episodes=3)
    assert not torch.equal(uniform["agent"], teams["agent"])


class TwoKinds(MultiAgentEnv):
    """A discrete team and a continuous one, or image observations: what TeamsEnvironment refuses."""

    agents = ("mover_0", "pointer_0")
    default_params = None

    def __init__(self, image_obs: bool = False) -> None:
        self.obs_shape = (3, 4, 4) if image_obs else (2,)
        self.pointer_space = envs.Discrete(2) if image_obs else envs.Box(0.0, 1.0, (2,))

    def observation_spaces(self, params: Any = None) -> dict[str, envs.Space]:
        return {team: envs.Box(-1.0, 1.0, self.obs_shape) for team in ("mover", "pointer")}

    def action_spaces(self, params: Any = None) -> dict[str, envs.Space]:
        return {"mover": envs.Discrete(3), "pointer": self.pointer_space}


def test_mixed_action_kinds_and_unflat_observations_are_clear_errors() -> None:
    with pytest.raises(
        ValueError, match=r"env_id: expected every team .*got \{'mover': 'Discrete', 'pointer': 'Box'\}"
    ):
        mappo.make_train(TINY, env=TwoKinds())
    with pytest.raises(
        ValueError, match=r"env_id: expected flat observations \[D\] for team 'mover' .*\[3, 4, 4\]"
    ):
        mappo.make_train(TINY, env=TwoKinds(image_obs=True))


# -- compiled equals eager ------------------------------------------------------------------


class LineState(NamedTuple):
    pos: torch.Tensor  # [A]
    target: torch.Tensor  # [A]
    time: torch.Tensor


@dataclasses.dataclass(frozen=True)
class LineParams:
    max_steps_in_episode: int = 2


class Line(MultiAgentEnv):
    """Two walkers and a leader on a line, each rewarded by its distance to its own target and
    moved by a continuous action (the leader's is the sum of two values): two teams of Gaussian
    actors with different action shapes, small enough for a cheap compile of the whole update."""

    agents = ("walker_0", "walker_1", "leader_0")
    default_params = LineParams()
    action_sizes = {"walker": 1, "leader": 2}

    def observation_spaces(self, params: Any = None) -> dict[str, envs.Space]:
        return {team: envs.Box(-math.inf, math.inf, (2,)) for team in self.action_sizes}

    def action_spaces(self, params: Any = None) -> dict[str, envs.Space]:
        return {team: envs.Box(-1.0, 1.0, (size,)) for team, size in self.action_sizes.items()}

    def global_state_space(self, params: Any = None) -> envs.Box:
        return envs.Box(-math.inf, math.inf, (6,))

    def _obs(self, state: LineState) -> dict[str, torch.Tensor]:
        obs = torch.stack([state.pos, state.target], -1)
        return {"walker": obs[:2], "leader": obs[2:]}

    def global_state(self, state: LineState, params: Any = None) -> torch.Tensor:
        return torch.cat([state.pos, state.target])

    def reset_env(self, key: torch.Tensor, params: Any) -> tuple[dict[str, torch.Tensor], LineState]:
        pos, target = random.uniform(key, (2, 3), minval=-1.0, maxval=1.0)
        state = LineState(pos, target, torch.zeros((), dtype=torch.int64, device=key.device))
        return self._obs(state), state

    def step_env(self, key: torch.Tensor, state: LineState, actions: dict[str, torch.Tensor], params: Any):
        move = torch.cat([actions["walker"][:, 0], actions["leader"].sum(-1)]).clamp(-1.0, 1.0)
        state = LineState(state.pos + 0.25 * move, state.target, state.time + 1)
        reward = -(state.pos - state.target).abs()
        truncated = (state.time >= params.max_steps_in_episode).expand(3)
        return (
            self._obs(state),
            state,
            {"walker": reward[:2], "leader": reward[2:]},
            {"walker": torch.zeros_like(truncated[:2]), "leader": torch.zeros_like(truncated[2:])},
            {"walker": truncated[:2], "leader": truncated[2:]},
            {},
        )


@pytest.mark.slow
def test_compiled_update_equals_eager() -> None:
    """Two teams of unshared Gaussian actors and centralised critics, across an auto-reset.
    Linear networks keep the graph, and so the compile, small: depth adds no code path."""
    config = dataclasses.replace(
        TINY,
        env_id="line",
        num_envs=2,
        num_steps=3,
        total_steps=12,
        update_epochs=1,
        hidden_sizes=(),
        share_params=False,
    )
    agent = mappo.make_train(config, env=Line())
    state, run_key = common.init_state(agent, random.key(0))
    eager_step = common.make_step(agent, batched=False, compile=False)
    compiled_step = common.make_step(agent, batched=False, compile=True)
    eager, compiled = state, state
    for _ in range(2):
        eager, metrics_e = eager_step(eager, run_key)
        compiled, metrics_c = compiled_step(compiled, run_key)
    assert_trees_close(compiled, eager, rtol=1e-4, atol=1e-5)
    assert_trees_close(metrics_c, metrics_e, rtol=1e-4, atol=1e-5)
    assert set(metrics_c) >= {"episode_return/walker", "episode_return/leader"}


# -- runs on disk and the CLI ---------------------------------------------------------------


def _rows(out: Path) -> list[dict[str, str]]:
    with (out / run.METRICS).open(newline="") as f:
        return list(csv.DictReader(f))


def test_train_run_resumes_exactly(tmp_path: Path) -> None:
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    common_args = dict(num_seeds=2, compile=False, progress=False, checkpoint_every=1, log_every=1)
    run.train_run("mappo", TINY, whole, **common_args)
    run.train_run("mappo", TINY, cut, stop_after=3, **common_args)
    run.train_run("mappo", TINY, cut, resume=True, **common_args)
    assert _rows(cut) == _rows(whole) and len(_rows(whole)) == 2 * TINY.num_updates


def _check_cli_run(out: Path, algo: str, env_id: str, capsys: pytest.CaptureFixture[str]) -> None:
    """One update's row: every team's return finite and summing to the episode return; the run
    folder names ``algo`` and ``env_id``; ``funrl eval`` of its checkpoint gives one finite return."""
    (row,) = _rows(out)
    teams = marl.make(env_id)[0].teams
    team_returns = [float(row[f"episode_return/{team}"]) for team in teams]
    assert all(math.isfinite(r) for r in team_returns)  # every env ended its one episode
    assert float(row["episode_return"]) == pytest.approx(sum(team_returns), rel=1e-5, abs=1e-4), row
    meta = json.loads((out / run.CONFIG).read_text())
    assert (meta["algo"], meta["config"]["env_id"]) == (algo, env_id)
    capsys.readouterr()
    assert cli_main(["eval", str(out), "--episodes", "2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert len(result["per_seed"]) == 1 and math.isfinite(result["mean_return"])


# Every scenario in both action variants (the CLI names a variant by its id alone), one fresh
# process per scenario: MAPPO trains one variant from `python -m funrl`, the action kind
# alternating between scenarios, and IPPO trains the other through the same CLI inside the test's
# process. So both algorithms and both action kinds run through the CLI, both kinds also from a
# fresh process, and each scenario pays for one torch import instead of two.
ACTION_VARIANTS = ("", "_continuous")
CLI_RUNS = [
    (scenario, ACTION_VARIANTS[i % 2], ACTION_VARIANTS[1 - i % 2])
    for i, scenario in enumerate(marl.SCENARIOS)
]


def test_cli_runs_cover_every_scenario_and_both_kinds_from_a_fresh_process() -> None:
    assert [scenario for scenario, *_ in CLI_RUNS] == list(marl.SCENARIOS)
    assert {fresh for _, fresh, _ in CLI_RUNS} == set(ACTION_VARIANTS)
    assert all({fresh, in_process} == set(ACTION_VARIANTS) for _, fresh, in_process in CLI_RUNS)


@pytest.mark.slow
@pytest.mark.parametrize(
    "scenario, fresh_variant, in_process_variant",
    CLI_RUNS,
    ids=[f"{scenario}-fresh{fresh or '_discrete'}" for scenario, fresh, _ in CLI_RUNS],
)
def test_cli_trains_every_scenario_and_action_variant(
    scenario: str,
    fresh_variant: str,
    in_process_variant: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """One eager update of the smallest CLI budget (2 envs x one 25-step episode) for each action
    variant, MAPPO in a fresh process and IPPO in this one, then ``funrl eval`` of each checkpoint."""
    options = ["--total-steps", "50", "--num-envs", "2", "--no-compile", "--no-progress"]
    fresh_id, in_process_id = f"mpe:{scenario}{fresh_variant}", f"mpe:{scenario}{in_process_variant}"
    fresh_out, in_process_out = tmp_path / "fresh", tmp_path / "in_process"
    train = [sys.executable, "-m", "funrl", "train", "mappo", "--env", fresh_id, "--out", str(fresh_out)]
    done = subprocess.run([*train, *options], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    _check_cli_run(fresh_out, "mappo", fresh_id, capsys)
    assert cli_main(["train", "ippo", "--env", in_process_id, "--out", str(in_process_out), *options]) == 0
    _check_cli_run(in_process_out, "ippo", in_process_id, capsys)


@pytest.mark.slow
def test_mappo_learns_to_spread_better_than_a_random_policy() -> None:
    """12k env steps (30 updates of 16 one-episode rollouts) lift the greedy team return on
    simple_spread clearly above a random policy's on the same 64 evaluation episodes."""
    config = mappo.MAPPOConfig(
        total_steps=16 * 25 * 30,
        num_envs=16,
        num_steps=25,
        update_epochs=5,
        num_minibatches=2,
        learning_rate=2e-3,
    )
    agent = mappo.make_train(config)
    state, metrics = agent(random.key(0), compile=False)
    key = random.key(2024)
    trained = common.evaluate(agent, state.params, key, episodes=64)
    uniform = mappo.evaluate_teams(agent, mappo.uniform_policy(agent), key, episodes=64)["agent"]
    margin = 3 * float(torch.cat([trained, uniform]).std()) / math.sqrt(64)
    assert float(trained.mean()) > float(uniform.mean()) + margin, (trained.mean(), uniform.mean(), margin)
    assert float(metrics["episode_return"][-5:].mean()) > float(metrics["episode_return"][:5].mean())


@pytest.mark.slow
def test_the_adversary_learns_while_the_good_agents_learn_too() -> None:
    """simple_adversary, both teams trained at once for 8k env steps (20 updates): the adversary's
    greedy policy, played against uniformly random good agents, brings it closer to the goal it
    must infer than a uniform adversary gets on the same 64 evaluation episodes (paired by their
    keys: the same starts, the same good agents' actions). The good agents are not held to a
    margin: they face a learning adversary, so their return against it moves both ways."""
    agent = mappo.make_train(mappo.MAPPOConfig(env_id="mpe:simple_adversary", total_steps=16 * 25 * 20))
    state, metrics = agent(random.key(0), compile=False)
    assert {"episode_return/adversary", "episode_return/agent"} <= set(metrics)
    uniform = mappo.uniform_policy(agent)
    greedy = mappo.greedy_policy(agent, state.params)
    adversary = agent.env.env.teams[0]
    assert adversary.name == "adversary"
    columns = torch.zeros(agent.env.action_space().shape, dtype=torch.bool)
    columns[adversary.actions] = True

    def trained_adversary(key: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        return torch.where(columns, greedy(key, obs), uniform(key, obs))

    key = random.key(2024)
    trained = mappo.evaluate_teams(agent, trained_adversary, key, episodes=64)["adversary"]
    baseline = mappo.evaluate_teams(agent, uniform, key, episodes=64)["adversary"]
    gain = trained - baseline
    assert float(gain.mean()) > 3 * float(gain.std()) / math.sqrt(64), (trained.mean(), baseline.mean())
