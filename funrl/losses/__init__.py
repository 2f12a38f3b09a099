"""funrl.losses: value estimators and losses as plain functions returning ``(loss, metrics)``.

Time-major ``[T, ...]`` estimators keep ``terminated`` (no bootstrap) and ``done = terminated |
truncated`` (trace cut) apart and take ``next_values`` explicitly. Input checks are static (shapes,
dtypes, Python numbers), so every function works under ``torch.func.vmap`` and ``torch.compile``.
"""

# Part A: value estimators, on-policy and value-based losses.
from funrl.losses.policy_gradient import (
    a2c_loss,
    normalize_advantages,
    ppo_clip_loss,
    ppo_loss,
    ppo_value_loss,
    reinforce_loss,
)
from funrl.losses.returns import (
    discounted_returns,
    gae,
    lambda_returns,
    n_step_returns,
    retrace,
    td_error,
    vtrace,
)

__all__ = [
    # returns
    "discounted_returns",
    "gae",
    "lambda_returns",
    "n_step_returns",
    "retrace",
    "td_error",
    "vtrace",
    # policy_gradient
    "a2c_loss",
    "normalize_advantages",
    "ppo_clip_loss",
    "ppo_loss",
    "ppo_value_loss",
    "reinforce_loss",
]
