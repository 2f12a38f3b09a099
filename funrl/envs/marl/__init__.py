"""Multi-agent environments as pure functions: the contract, the MPE scenarios, PettingZoo bridges.

The contract is funrl's single-agent one (``funrl.envs.core``) with teams of agents::

    env, params = funrl.envs.marl.make("simple_spread")        # or "mpe:simple_spread"
    obs, state = env.reset(key, params)
    obs, state, rewards, terminated, truncated, info = env.step(key, state, actions, params)

- **Teams.** Observations, actions, rewards, ``terminated`` and ``truncated`` are dicts
  ``team -> tensor`` whose tensors hold the team's agents on their leading axis: ``[A_team, ...]``
  (TorchRL's grouping of VMAS and PettingZoo agents; JaxMARL keys per agent instead). A
  homogeneous env has one team, so ``obs["agent"]`` of simple_spread is ``[3, 18]``; agents that
  differ (spaces, roles) are in different teams. A team is the agent id without its trailing
  ``_<index>``: ``agent``, ``adversary``, ``speaker``, ``listener``. ``env.agents`` lists every
  agent id in the environment's fixed order (mpe2's, PettingZoo's ``possible_agents``);
  ``env.teams`` maps each team to its ids, in that order, and the teams in order concatenate to
  ``env.agents``. Rewards are float32 ``[A_team]``, flags bool ``[A_team]``, discrete actions
  int64 ``[A_team]``, continuous actions float32 ``[A_team, D]``.
- **Spaces.** ``env.observation_spaces(params)`` and ``env.action_spaces(params)`` map each team
  to ONE agent's ``funrl.envs.Box``/``Discrete`` (the team tensor adds ``[A_team]`` in front).
- **Global state.** ``env.global_state(state, params)`` is a flat float32 vector for centralised
  critics (MPE: every agent's observation in agent order, mpe2's ``state()``), with
  ``env.global_state_space(params)``. It is a function of the state, not a key of the obs dict,
  so a critic can compute it for any state, batched or not.
- **Episodes.** Every agent of an environment starts and ends its episode together; ``step``
  auto-resets once every agent is ``terminated | truncated`` and keeps the pre-reset
  observations in ``info["final_obs"]`` and the pre-reset global state in
  ``info["final_global_state"]`` (for bootstrapping truncated episodes). ``step_env`` and
  ``reset_env`` are the raw transition and reset; ``step`` is ``step_with(draw_step(key,
  params), ...)``, as for one agent, so a rollout draws every step's resets before its loop. States are NamedTuples (episode time
  included); params are frozen dataclasses separate from them, and fix no shapes: what fixes a
  shape (the number of agents, discrete or continuous actions) is an argument of the env.
- **Purity and batching.** Nothing holds state and every random draw takes a key, so
  ``funrl.envs.marl.vmap(env, num_envs)`` batches environments (team tensors become
  ``[num_envs, A_team, ...]``) and ``torch.compile`` compiles a batched step. The agent axis is an
  ordinary tensor axis: a shared policy is ``torch.func.vmap(policy, in_dims=(None, 0))`` over it,
  independent policies a vmap over stacked params as well.
- **Bad input.** ``step`` checks actions (teams, dtype, shape) at every call, compiled or not, and
  in eager mode also their values (NaN or inf, a discrete action out of range), with an error
  that names the team.

The Multi-Particle Environments (mpe2's semantics and defaults, one file each on the shared
``physics`` and ``mpe`` modules): ``simple_spread``, ``simple_tag``, ``simple_adversary``,
``simple_reference``, ``simple_speaker_listener``, ``simple_push`` (:data:`SCENARIOS`). Each is
also registered as ``<id>_continuous``: ``make("simple_tag_continuous")`` is
``make("simple_tag", continuous_actions=True)``, so that an id alone (``funrl train mappo --env
mpe:simple_tag_continuous``) names either action variant.

Bridges: ``to_pettingzoo(env_id_or_env, params=None)`` is a PettingZoo ``ParallelEnv`` of a funrl
env; ``from_pettingzoo(parallel_env)`` puts any PettingZoo parallel env behind this contract, in
eager mode. Design notes: ``docs/marl.md``.
"""

from funrl.envs.marl.batched import BatchedMultiAgentEnv, vmap
from funrl.envs.marl.core import MultiAgentEnv, check_actions, team_of
from funrl.envs.marl.mpe import Entity, MPEEnvironment, MPEParams, MPEState
from funrl.envs.marl.registry import make, register, registry

# Each scenario module registers its id on import.
from funrl.envs.marl.simple_spread import SimpleSpread, SimpleSpreadParams  # noqa: E402  isort: skip
from funrl.envs.marl.simple_tag import SimpleTag  # noqa: E402  isort: skip
from funrl.envs.marl.simple_adversary import SimpleAdversary  # noqa: E402  isort: skip
from funrl.envs.marl.simple_reference import SimpleReference, SimpleReferenceParams  # noqa: E402  isort: skip
from funrl.envs.marl.simple_speaker_listener import SimpleSpeakerListener  # noqa: E402  isort: skip
from funrl.envs.marl.simple_push import SimplePush  # noqa: E402  isort: skip

SCENARIOS = (
    "simple_spread",
    "simple_tag",
    "simple_adversary",
    "simple_reference",
    "simple_speaker_listener",
    "simple_push",
)
"""The six Multi-Particle Environments; each is also registered as ``<id>_continuous``."""


def _continuous_variant(scenario: str):  # noqa: ANN202
    def make_continuous(**kwargs: object) -> tuple[MPEEnvironment, MPEParams]:
        if "continuous_actions" in kwargs:
            raise TypeError(
                f"{scenario}_continuous: continuous_actions is fixed to True; "
                f"got continuous_actions={kwargs['continuous_actions']!r} (make {scenario!r} instead)"
            )
        return make(scenario, continuous_actions=True, **kwargs)

    return make_continuous


# An id alone names an env on the command line (``--env mpe:simple_tag_continuous``), so each
# scenario's continuous-action variant gets an id of its own.
for _scenario in SCENARIOS:
    register(f"{_scenario}_continuous", _continuous_variant(_scenario))

__all__ = [
    "BatchedMultiAgentEnv",
    "Entity",
    "MPEEnvironment",
    "MPEParams",
    "MPEState",
    "MultiAgentEnv",
    "SCENARIOS",
    "SimpleAdversary",
    "SimplePush",
    "SimpleReference",
    "SimpleReferenceParams",
    "SimpleSpeakerListener",
    "SimpleSpread",
    "SimpleSpreadParams",
    "SimpleTag",
    "check_actions",
    "make",
    "register",
    "registry",
    "team_of",
    "vmap",
    "to_pettingzoo",
    "from_pettingzoo",
]

_BRIDGES = (
    "to_pettingzoo",
    "from_pettingzoo",
    "FunrlParallelEnv",
    "PettingZooEnv",
    "PettingZooState",
    "seed_of",
)


def __getattr__(name: str) -> object:
    # PettingZoo is optional: the bridges import it on first use, not with funrl.
    if name in _BRIDGES:
        from funrl.envs.marl import pettingzoo_bridge

        return getattr(pettingzoo_bridge, name)
    raise AttributeError(f"module 'funrl.envs.marl' has no attribute {name!r}")
