"""REDQ losses: the random critic subset, the subset target, the ensemble-mean actor, objectives."""

import pytest
import torch
from actor_critic_data import batch_sizes, loop_q, networks, replay_batch, seeds, transitions
from hypothesis import given
from hypothesis import strategies as st

from funrl import losses as L
from funrl import nets, random


@given(seed=seeds, num_critics=st.integers(1, 12), data=st.data())
def test_redq_subset_size_respected_and_distinct(seed, num_critics, data):
    subset_size = data.draw(st.integers(1, num_critics))
    subset = L.redq_subset(random.key(seed), num_critics, subset_size)
    assert subset.shape == (subset_size,) and subset.dtype == torch.int64
    assert len(set(subset.tolist())) == subset_size
    assert 0 <= subset.min().item() and subset.max().item() < num_critics


def test_redq_subset_is_uniform_over_critics():
    counts = torch.zeros(10)
    for i in range(400):
        counts[L.redq_subset(random.fold_in(random.key(0), i), 10, 2)] += 1
    # Each critic is picked with probability 2/10: 80 expected out of 400 draws (sd ~8).
    assert counts.sum().item() == 800 and counts.min().item() > 50 and counts.max().item() < 110


@given(seed=seeds, batch=batch_sizes, alpha=st.floats(0.0, 1.0))
def test_redq_target_is_min_over_the_subset_only(seed, batch, alpha):
    d = transitions(seed, batch, ensemble=10)
    subset = L.redq_subset(random.key(seed), 10, 2)
    out = L.redq_target_value(d["next_q_values"], subset, d["next_log_prob"], alpha)
    for b in range(batch):
        min_q = min(d["next_q_values"][i, b].item() for i in subset.tolist())
        assert out[b].item() == pytest.approx(
            min_q - alpha * d["next_log_prob"][b].item(), rel=1e-12, abs=1e-12
        )
    with pytest.raises(ValueError, match="subset_size"):
        L.redq_subset(random.key(0), 10, 11)


def test_redq_objective_uses_the_drawn_subset_of_target_critics():
    n, b, key = networks(num_critics=6), replay_batch(5), random.key(2)
    loss, metrics = L.redq_critic_objective(
        n["critic_params"], n["actor_params"], n["target_critic_params"], 0.1, b, key,
        actor=n["actor"], critic=n["critic"], gamma=0.99, subset_size=3,
    )  # fmt: skip
    subset_key, action_key = random.split(key)
    subset = L.redq_subset(subset_key, 6, 3)
    torch.testing.assert_close(metrics["subset"], subset)
    next_action, next_log_prob = nets.distributions.tanh_normal.sample_and_log_prob(
        action_key, *nets.apply(n["actor"], n["actor_params"], b["next_obs"])
    )
    all_next_q = loop_q(n["critic"], n["target_critic_params"], b["next_obs"], next_action)
    target = b["reward"] + 0.99 * (~b["terminated"]).float() * L.redq_target_value(
        all_next_q, subset, next_log_prob, 0.1
    )
    q = loop_q(n["critic"], n["critic_params"], b["obs"], b["action"])
    torch.testing.assert_close(loss, ((q - target) ** 2).sum(0).mean(), rtol=1e-5, atol=1e-5)
    actor_loss, _ = L.redq_actor_objective(
        n["actor_params"], n["critic_params"], 0.1, b, key, actor=n["actor"], critic=n["critic"]
    )
    action, log_prob = nets.distributions.tanh_normal.sample_and_log_prob(
        key, *nets.apply(n["actor"], n["actor_params"], b["obs"])
    )
    q_pi = loop_q(n["critic"], n["critic_params"], b["obs"], action)
    torch.testing.assert_close(actor_loss, (0.1 * log_prob - q_pi.mean(0)).mean(), rtol=1e-5, atol=1e-6)
