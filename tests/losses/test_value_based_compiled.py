"""Value-based losses compiled: DQN, Double DQN, C51 and QR-DQN (targets, losses, gradients) in one graph."""

from __future__ import annotations

import pytest
import torch

from funrl.control import compile as funrl_compile
from funrl.losses import (
    c51_loss,
    categorical_q_learning_target,
    double_q_learning_target,
    dqn_loss,
    q_learning_target,
    qr_dqn_loss,
    quantile_q_learning_target,
)

GAMMA, V_MIN, V_MAX = 0.99, -5.0, 5.0


def value_based_losses(
    online: dict[str, torch.Tensor], batch: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The four losses with their targets, summed: one scalar whose gradient reaches every head."""
    actions, rewards, terminated = batch["actions"], batch["rewards"], batch["terminated"]
    dqn, dqn_metrics = dqn_loss(
        online["q"], actions, q_learning_target(rewards, batch["next_q"], terminated, GAMMA)
    )
    double_target = double_q_learning_target(rewards, online["next_q"], batch["next_q"], terminated, GAMMA)
    double, _ = dqn_loss(online["q"], actions, double_target, loss_type="mse")
    c51_target = categorical_q_learning_target(
        rewards,
        batch["next_logits"],
        terminated,
        GAMMA,
        V_MIN,
        V_MAX,
        next_logits_online=online["next_logits"],
    )
    c51, c51_metrics = c51_loss(online["logits"], actions, c51_target)
    qr_target = quantile_q_learning_target(rewards, batch["next_quantiles"], terminated, GAMMA)
    qr, qr_metrics = qr_dqn_loss(online["quantiles"], actions, qr_target)
    losses = {"dqn": dqn, "double_dqn": double, "c51": c51, "qr_dqn": qr}
    return dqn + double + c51 + qr, {**losses, **dqn_metrics, **c51_metrics, **qr_metrics}


def make_inputs(seed: int, size: int = 16, actions: int = 3, atoms: int = 11) -> tuple[dict, dict]:
    g = torch.Generator().manual_seed(seed)

    def normal(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g)

    online = {
        "q": normal(size, actions),
        "next_q": normal(size, actions),
        "logits": normal(size, actions, atoms),
        "next_logits": normal(size, actions, atoms),
        "quantiles": normal(size, actions, atoms).sort(-1).values,
    }
    batch = {
        "actions": torch.randint(0, actions, (size,), generator=g),
        "rewards": normal(size),
        "terminated": torch.rand(size, generator=g) < 0.3,
        "next_q": normal(size, actions),
        "next_logits": normal(size, actions, atoms),
        "next_quantiles": normal(size, actions, atoms).sort(-1).values,
    }
    return online, batch


@pytest.mark.slow
def test_value_based_losses_and_gradients_compiled_equal_eager():
    step = torch.func.grad_and_value(value_based_losses, has_aux=True)
    compiled = funrl_compile(step)
    online, batch = make_inputs(0)
    grads, (total, metrics) = step(online, batch)
    got_grads, (got_total, got_metrics) = compiled(online, batch)
    torch.testing.assert_close(got_total, total, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got_metrics, metrics, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got_grads, grads, rtol=1e-5, atol=1e-6)
    # The gradient reaches every online head except the Double-DQN selector (argmax: no gradient).
    assert all(grads[k].abs().sum() > 0 for k in ("q", "logits", "quantiles"))
    # A second batch runs the same graph: nothing from the first call is baked in.
    online, batch = make_inputs(1)
    got_grads, (got_total, _) = compiled(online, batch)
    grads, (total, _) = step(online, batch)
    torch.testing.assert_close(got_total, total, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got_grads, grads, rtol=1e-5, atol=1e-6)
