"""simple_spread's team reward against the reward of the MAPPO authors' code (marlbenchmark/
on-policy, ``simple_spread.py`` with ``share_reward``), which BENCHMARKS.md converts to.

There every agent is paid ``-(sum over landmarks of the nearest agent's distance) - (agents it
overlaps, itself included)`` and each agent receives the sum of those; with mpe2's default
``local_ratio=0.5`` that shared step reward is ``2 * team reward - num_agents``.
"""

from __future__ import annotations

import torch
from mpe_reference import random_actions

from funrl import random
from funrl.envs import marl

AGENT_SIZE = 0.15  # simple_spread's agents' radius, in both codes


def on_policy_shared_reward(pos: torch.Tensor, num_agents: int) -> torch.Tensor:
    agents, landmarks = pos[:num_agents], pos[num_agents:]
    coverage = -torch.cdist(landmarks, agents).min(-1).values.sum()
    # the agent-agent check counts an agent against itself (distance 0 < two radii)
    overlaps = (torch.cdist(agents, agents) < 2 * AGENT_SIZE).sum(-1)
    return (coverage - overlaps).sum()


def test_the_shared_on_policy_reward_is_twice_the_team_reward_less_one_per_agent() -> None:
    env, params = marl.make("mpe:simple_spread")
    _, state = env.reset(random.key(0), params)
    huddled = torch.tensor([[0.0, 0.0], [0.2, 0.0], [0.1, 0.15]])  # every pair overlapping at first
    state = state._replace(pos=torch.cat([huddled, state.pos[3:]]))
    keys = random.split(random.key(1), 2 * (params.max_steps_in_episode - 1))
    collided = 0
    for t in range(params.max_steps_in_episode - 1):  # the last step returns the auto-reset state
        action = random_actions(env, keys[2 * t])
        _, state, rewards, *_ = env.step(keys[2 * t + 1], state, action, params)
        expected = on_policy_shared_reward(state.pos.double(), env.num_agents)
        team = rewards["agent"].double().sum()
        torch.testing.assert_close(2 * team - env.num_agents, expected, rtol=1e-5, atol=1e-5)
        agents = state.pos[: env.num_agents]
        collided += (
            int((torch.cdist(agents, agents) < 2 * AGENT_SIZE).sum()) > env.num_agents
        )  # beyond self-overlaps
    assert collided, "no step with a collision: the collision term went untested"
