"""Shared data for the actor-critic loss tests: transitions, small networks, replay batches.

A plain module (imported like ``offpolicy_checks``); reference values in the tests are written
from the papers' equations with explicit Python loops over critics and samples.
"""

import torch
from hypothesis import strategies as st
from torch import nn

from funrl import nets, random, tree

seeds = st.integers(0, 2**16)
ensemble_sizes = st.integers(1, 5)
batch_sizes = st.integers(1, 17)

OBS_DIM, ACT_DIM, BATCH = 3, 2, 8


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def transitions(seed: int, batch: int, ensemble: int = 2) -> dict:
    g = generator(seed)
    return {
        "q_values": torch.randn(ensemble, batch, generator=g, dtype=torch.float64),
        "next_q_values": torch.randn(ensemble, batch, generator=g, dtype=torch.float64),
        "reward": torch.randn(batch, generator=g, dtype=torch.float64),
        "terminated": torch.rand(batch, generator=g) < 0.3,
        "log_prob": torch.randn(batch, generator=g, dtype=torch.float64),
        "next_log_prob": torch.randn(batch, generator=g, dtype=torch.float64),
    }


def networks(seed: int = 0, num_critics: int = 2) -> dict:
    keys = random.split(random.key(seed), 4)
    actor = nets.GaussianActor(OBS_DIM, ACT_DIM, (16,), "relu", state_dependent_std=True)
    det_actor = nn.Sequential(nets.MLP(OBS_DIM, (16,), ACT_DIM, "relu", device="meta"), nn.Tanh())
    critic = nets.ContinuousQ(OBS_DIM, ACT_DIM, (16,))
    critic_params = nets.init_ensemble(critic, keys[1], num_critics)
    return {
        "actor": actor,
        "det_actor": det_actor,
        "critic": critic,
        "actor_params": nets.init(actor, keys[0]),
        "det_actor_params": nets.init(det_actor, keys[3]),
        "critic_params": critic_params,
        "target_critic_params": tree.map(lambda p: p + 0.01, critic_params),
    }


def replay_batch(seed: int, batch: int = BATCH) -> dict:
    g = generator(seed)
    return {
        "obs": torch.randn(batch, OBS_DIM, generator=g),
        "action": torch.rand(batch, ACT_DIM, generator=g) * 2 - 1,
        "reward": torch.randn(batch, generator=g),
        "next_obs": torch.randn(batch, OBS_DIM, generator=g),
        "terminated": torch.rand(batch, generator=g) < 0.25,
    }


def loop_q(critic, stacked, *inputs):
    return torch.stack([nets.apply(critic, p, *inputs) for p in tree.unstack(stacked)])
