"""DDPG and TD3 losses: target policy smoothing, clipped double-Q, the deterministic actor, objectives."""

import pytest
import torch
from actor_critic_data import ACT_DIM, BATCH, generator, loop_q, networks, replay_batch, seeds, transitions
from hypothesis import given
from hypothesis import strategies as st

from funrl import losses as L
from funrl import nets, random, tree


@given(
    seed=seeds,
    policy_noise=st.floats(0.0, 3.0),
    noise_clip=st.floats(0.0, 1.0),
    low=st.floats(-2.0, 0.0),
    width=st.floats(0.0, 3.0),
)
def test_td3_smoothing_noise_is_clipped_and_actions_stay_in_bounds(
    seed, policy_noise, noise_clip, low, width
):
    key = random.key(seed)
    noise = L.td3_smoothing_noise(key, (64, 3), policy_noise, noise_clip)
    assert noise.shape == (64, 3) and noise.dtype == torch.float32
    assert noise.abs().max().item() <= float(torch.tensor(noise_clip))  # the clip in float32
    next_action = 4.0 * torch.randn(64, 3, generator=generator(seed))
    # Bounds rounded to float32 first, so the comparison is exact in the actions' dtype.
    low, high = float(torch.tensor(low)), float(torch.tensor(low + width))
    action = L.smoothed_target_action(next_action, noise, low, high)
    assert action.min().item() >= low and action.max().item() <= high
    inside = (next_action + noise >= low) & (next_action + noise <= high)
    torch.testing.assert_close(action[inside], (next_action + noise)[inside])


def test_td3_smoothing_noise_is_pure_and_key_dependent():
    a = L.td3_smoothing_noise(random.key(3), (128,), 0.2, 0.5)
    b = L.td3_smoothing_noise(random.key(3), (128,), 0.2, 0.5)
    c = L.td3_smoothing_noise(random.key(4), (128,), 0.2, 0.5)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.equal(a, c)
    # Unclipped part is N(0, 0.2^2): with clip 0.5 (2.5 sigma) about 1.2% of samples are clipped.
    big = L.td3_smoothing_noise(random.key(5), (20000,), 0.2, 0.5)
    assert abs(big.std().item() - 0.2) < 0.01
    assert 0.005 < (big.abs() == 0.5).float().mean().item() < 0.025


def test_td3_target_uses_clipped_double_q():
    d = transitions(2, 9)
    target = L.bellman_target(d["reward"], d["terminated"], d["next_q_values"].min(0).values, 0.99)
    # Planted bug: averaging the critics instead of the minimum gives a different (higher) target.
    wrong = L.bellman_target(d["reward"], d["terminated"], d["next_q_values"].mean(0), 0.99)
    assert (target <= wrong + 1e-12).all() and not torch.allclose(target, wrong)


def test_ddpg_actor_loss_is_negative_mean_q():
    q = torch.tensor([1.0, -2.0, 4.0])
    loss, metrics = L.td3_actor_loss(q)
    assert loss.item() == pytest.approx(-1.0)
    assert metrics["q_actor_mean"].item() == pytest.approx(1.0)


def test_td3_objectives_equal_their_tensor_level_composition():
    n, b, key = networks(), replay_batch(3), random.key(11)
    actor, critic = n["det_actor"], n["critic"]
    loss, _ = L.td3_critic_objective(
        n["critic_params"], n["det_actor_params"], n["target_critic_params"], b, key,
        actor=actor, critic=critic, gamma=0.9, policy_noise=0.3, noise_clip=0.4,
        action_low=-0.8, action_high=0.8,
    )  # fmt: skip
    noise = (random.normal(key, (BATCH, ACT_DIM)) * 0.3).clamp(-0.4, 0.4)
    next_action = (nets.apply(actor, n["det_actor_params"], b["next_obs"]) + noise).clamp(-0.8, 0.8)
    next_q = loop_q(critic, n["target_critic_params"], b["next_obs"], next_action)
    target = b["reward"] + 0.9 * (~b["terminated"]).float() * next_q.min(0).values
    q = loop_q(critic, n["critic_params"], b["obs"], b["action"])
    torch.testing.assert_close(loss, ((q - target) ** 2).sum(0).mean(), rtol=1e-5, atol=1e-6)

    actor_loss, _ = L.td3_actor_objective(
        n["det_actor_params"], n["critic_params"], b, actor=actor, critic=critic
    )
    q1 = nets.apply(
        critic,
        tree.index(n["critic_params"], 0),
        b["obs"],
        nets.apply(actor, n["det_actor_params"], b["obs"]),
    )
    torch.testing.assert_close(actor_loss, -q1.mean(), rtol=1e-6, atol=1e-6)


def test_td3_delayed_actor_update_with_periodic_update():
    old, new = {"w": torch.zeros(2)}, {"w": torch.ones(2)}
    policy_delay = 2
    applied = [
        tree.tree_equal(L.periodic_update(old, new, torch.tensor(step), policy_delay), new)
        for step in range(6)
    ]
    assert applied == [True, False, True, False, True, False]


def test_ddpg_objectives_with_a_single_critic():
    n, b = networks(), replay_batch(4)
    actor, critic = n["det_actor"], n["critic"]
    critic_params = tree.index(n["critic_params"], 0)
    target_params = tree.index(n["target_critic_params"], 1)
    loss, _ = L.ddpg_critic_objective(
        critic_params, n["det_actor_params"], target_params, b, actor=actor, critic=critic, gamma=0.95
    )
    next_q = nets.apply(
        critic, target_params, b["next_obs"], nets.apply(actor, n["det_actor_params"], b["next_obs"])
    )
    target = b["reward"] + 0.95 * (~b["terminated"]).float() * next_q
    q = nets.apply(critic, critic_params, b["obs"], b["action"])
    torch.testing.assert_close(loss, ((q - target) ** 2).mean(), rtol=1e-5, atol=1e-6)
    actor_loss, _ = L.ddpg_actor_objective(
        n["det_actor_params"], critic_params, b, actor=actor, critic=critic
    )
    q_mu = nets.apply(critic, critic_params, b["obs"], nets.apply(actor, n["det_actor_params"], b["obs"]))
    torch.testing.assert_close(actor_loss, -q_mu.mean())


def test_bad_inputs_raise_value_errors_naming_the_argument():
    with pytest.raises(ValueError, match="noise_clip"):
        L.td3_smoothing_noise(random.key(0), (3,), 0.2, -0.5)
    with pytest.raises(ValueError, match="noise"):
        L.smoothed_target_action(torch.zeros(4, 2), torch.zeros(4, 3), -1.0, 1.0)
    with pytest.raises(ValueError, match="action_low"):
        L.smoothed_target_action(torch.zeros(4, 2), torch.zeros(4, 2), 1.0, -1.0)
    with pytest.raises(ValueError, match="q_value"):
        L.ddpg_actor_loss(torch.tensor(1.0))
