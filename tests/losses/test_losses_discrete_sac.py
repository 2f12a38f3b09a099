"""Discrete SAC losses: exact expectations over actions, target entropy, objectives on networks."""

import math

import pytest
import torch
from actor_critic_data import (
    BATCH,
    OBS_DIM,
    batch_sizes,
    ensemble_sizes,
    generator,
    loop_q,
    replay_batch,
    seeds,
)
from hypothesis import given
from hypothesis import strategies as st

from funrl import losses as L
from funrl import nets, random


def _discrete(seed: int, batch: int, ensemble: int, actions: int) -> dict:
    g = generator(seed)
    return {
        "q_values": torch.randn(ensemble, batch, actions, generator=g, dtype=torch.float64),
        "logits": 3.0 * torch.randn(batch, actions, generator=g, dtype=torch.float64),
        "action": torch.randint(0, actions, (batch,), generator=g),
        "target": torch.randn(batch, generator=g, dtype=torch.float64),
    }


@given(
    seed=seeds, batch=batch_sizes, ensemble=ensemble_sizes, actions=st.integers(2, 6), alpha=st.floats(0, 2)
)
def test_discrete_sac_losses_match_reference(seed, batch, ensemble, actions, alpha):
    d = _discrete(seed, batch, ensemble, actions)
    value = L.discrete_soft_state_value(d["q_values"], d["logits"], alpha)
    actor, metrics = L.discrete_sac_actor_loss(d["q_values"], d["logits"], alpha)
    critic, _ = L.discrete_sac_critic_loss(d["q_values"], d["action"], d["target"])
    actor_ref = critic_ref = 0.0
    for b in range(batch):
        probs = torch.softmax(d["logits"][b], -1).tolist()
        min_q = [min(d["q_values"][e, b, a].item() for e in range(ensemble)) for a in range(actions)]
        v = sum(p * (q - alpha * math.log(p)) for p, q in zip(probs, min_q, strict=True))
        assert value[b].item() == pytest.approx(v, rel=1e-9, abs=1e-9)
        actor_ref += sum(p * (alpha * math.log(p) - q) for p, q in zip(probs, min_q, strict=True))
        assert metrics["log_prob"][b].item() == pytest.approx(sum(p * math.log(p) for p in probs), abs=1e-9)
        for e in range(ensemble):
            critic_ref += (d["q_values"][e, b, d["action"][b]].item() - d["target"][b].item()) ** 2
    assert actor.item() == pytest.approx(actor_ref / batch, rel=1e-9, abs=1e-9)
    assert critic.item() == pytest.approx(critic_ref / batch, rel=1e-9, abs=1e-9)


def test_discrete_sac_target_entropy():
    assert L.discrete_sac_target_entropy(4) == pytest.approx(0.98 * math.log(4))
    with pytest.raises(ValueError, match="num_actions"):
        L.discrete_sac_target_entropy(1)
    with pytest.raises(ValueError, match="action"):
        L.discrete_sac_critic_loss(torch.zeros(2, 3, 4), torch.zeros(3), torch.zeros(3))


def test_discrete_sac_objectives_on_networks():
    keys = random.split(random.key(0), 2)
    actor = nets.MLP(OBS_DIM, (16,), 4, "relu")
    critic = nets.MLP(OBS_DIM, (16,), 4, "relu")
    actor_params, critic_params = nets.init(actor, keys[0]), nets.init_ensemble(critic, keys[1], 2)
    b = replay_batch(6)
    b["action"] = torch.randint(0, 4, (BATCH,), generator=generator(0))
    loss, _ = L.discrete_sac_critic_objective(
        critic_params, actor_params, critic_params, 0.3, b, actor=actor, critic=critic, gamma=0.9
    )
    next_v = L.discrete_soft_state_value(
        loop_q(critic, critic_params, b["next_obs"]), nets.apply(actor, actor_params, b["next_obs"]), 0.3
    )
    target = b["reward"] + 0.9 * (~b["terminated"]).float() * next_v
    q = (
        loop_q(critic, critic_params, b["obs"])
        .gather(-1, b["action"].expand(2, BATCH).unsqueeze(-1))
        .squeeze(-1)
    )
    torch.testing.assert_close(loss, ((q - target) ** 2).sum(0).mean(), rtol=1e-5, atol=1e-6)
    actor_loss, metrics = L.discrete_sac_actor_objective(
        actor_params, critic_params, 0.3, b, actor=actor, critic=critic
    )
    assert torch.isfinite(actor_loss) and metrics["log_prob"].shape == (BATCH,)
