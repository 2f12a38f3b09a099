"""CrossQ losses: the detached online target and the joint batch-norm forward pass."""

import pytest
import torch
from actor_critic_data import ACT_DIM, BATCH, OBS_DIM, networks, replay_batch, transitions
from torch import nn

from funrl import losses as L
from funrl import nets, random, tree


def test_crossq_target_is_detached_soft_bellman_target():
    d = transitions(4, 7)
    next_q = d["next_q_values"].clone().requires_grad_(True)
    target = L.crossq_target(d["reward"], d["terminated"], next_q, d["next_log_prob"], 0.99, 0.1)
    assert not target.requires_grad
    expected = L.bellman_target(
        d["reward"], d["terminated"], L.soft_state_value(d["next_q_values"], d["next_log_prob"], 0.1), 0.99
    )
    torch.testing.assert_close(target, expected, rtol=0, atol=0)


class _BatchNormQ(nn.Module):
    """A small CrossQ-style critic: batch norm on the input and the hidden layer."""

    def __init__(self):
        super().__init__()
        with torch.device("meta"):
            self.net = nn.Sequential(
                nn.BatchNorm1d(OBS_DIM + ACT_DIM, momentum=0.01),
                nn.Linear(OBS_DIM + ACT_DIM, 16),
                nn.BatchNorm1d(16, momentum=0.01),
                nn.ReLU(),
                nn.Linear(16, 1),
            )

    def forward(self, obs, action):
        return self.net(torch.cat([obs, action], -1)).squeeze(-1)


def test_crossq_objectives_joint_batch_norm_forward_and_pure_buffers():
    n, b, key = networks(), replay_batch(7), random.key(5)
    critic, critic_eval = _BatchNormQ(), _BatchNormQ().eval()
    params = nets.init_ensemble(critic, random.key(1), 2)
    buffers = tree.stack([nets.init_buffers(critic)] * 2)
    buffers_before = tree.map(torch.clone, buffers)
    loss, metrics = L.crossq_critic_objective(
        params, buffers, n["actor_params"], 0.2, b, key, actor=n["actor"], critic=critic, gamma=0.99
    )
    assert tree.tree_equal(buffers, buffers_before)  # inputs untouched
    # Reference: per-member functional_call on the joint batch, buffers updated on copies.
    next_action, next_log_prob = nets.distributions.tanh_normal.sample_and_log_prob(
        key, *nets.apply(n["actor"], n["actor_params"], b["next_obs"])
    )
    joint_obs, joint_action = torch.cat([b["obs"], b["next_obs"]]), torch.cat([b["action"], next_action])
    q_members, new_buffers = [], []
    for p, buf in zip(tree.unstack(params), tree.unstack(buffers), strict=True):
        buf = tree.map(torch.clone, buf)
        q_members.append(nets.apply(critic, {**p, **buf}, joint_obs, joint_action))
        new_buffers.append(buf)
    q, next_q = torch.stack(q_members).split(BATCH, dim=1)
    target = b["reward"] + 0.99 * (~b["terminated"]).float() * (next_q.min(0).values - 0.2 * next_log_prob)
    torch.testing.assert_close(loss, ((q - target) ** 2).sum(0).mean(), rtol=1e-5, atol=1e-5)
    assert tree.tree_allclose(metrics["critic_buffers"], tree.stack(new_buffers), rtol=1e-6, atol=1e-7)
    assert not tree.tree_allclose(metrics["critic_buffers"], buffers)  # statistics moved
    actor_loss, _ = L.crossq_actor_objective(
        n["actor_params"],
        params,
        metrics["critic_buffers"],
        0.2,
        b,
        key,
        actor=n["actor"],
        critic=critic_eval,
    )
    assert torch.isfinite(actor_loss)
    with pytest.raises(ValueError, match="critic.*training mode"):
        L.crossq_critic_objective(
            params, buffers, n["actor_params"], 0.2, b, key, actor=n["actor"], critic=critic_eval, gamma=0.99
        )
    with pytest.raises(ValueError, match="critic.*eval mode"):
        L.crossq_actor_objective(
            n["actor_params"], params, buffers, 0.2, b, key, actor=n["actor"], critic=critic
        )
