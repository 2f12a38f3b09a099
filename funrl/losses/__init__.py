"""funrl.losses: value estimators and losses as plain functions returning ``(loss, metrics)``.

Time-major ``[T, ...]`` estimators keep ``terminated`` (no bootstrap) and ``done = terminated |
truncated`` (trace cut) apart and take ``next_values`` explicitly. Input checks are static (shapes,
dtypes, Python numbers), so every function works under ``torch.func.vmap`` and ``torch.compile``.
"""

# Part A: value estimators, on-policy and value-based losses (returns, policy_gradient).
# Part B: continuous control and target networks (continuous, target).
from funrl.losses.continuous import (
    bellman_target,
    crossq_target,
    ddpg_actor_loss,
    ddpg_critic_loss,
    discrete_sac_actor_loss,
    discrete_sac_critic_loss,
    discrete_sac_target_entropy,
    discrete_soft_state_value,
    ensemble_critic_loss,
    redq_subset,
    redq_target_value,
    sac_actor_loss,
    sac_critic_loss,
    sac_target_entropy,
    sac_temperature_loss,
    smoothed_target_action,
    soft_state_value,
    td3_actor_loss,
    td3_critic_loss,
    td3_smoothing_noise,
)
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
from funrl.losses.target import hard_update, periodic_update, polyak
from funrl.losses.value_based import (
    c51_loss,
    categorical_projection,
    categorical_q_learning_target,
    double_q_learning_target,
    dqn_loss,
    n_step_q_targets,
    q_learning_target,
    qr_dqn_loss,
    quantile_huber_loss,
    quantile_q_learning_target,
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
    # value_based
    "c51_loss",
    "categorical_projection",
    "categorical_q_learning_target",
    "double_q_learning_target",
    "dqn_loss",
    "n_step_q_targets",
    "q_learning_target",
    "qr_dqn_loss",
    "quantile_huber_loss",
    "quantile_q_learning_target",
    # policy_gradient
    "a2c_loss",
    "normalize_advantages",
    "ppo_clip_loss",
    "ppo_loss",
    "ppo_value_loss",
    "reinforce_loss",
    # continuous
    "bellman_target",
    "crossq_target",
    "ddpg_actor_loss",
    "ddpg_critic_loss",
    "discrete_sac_actor_loss",
    "discrete_sac_critic_loss",
    "discrete_sac_target_entropy",
    "discrete_soft_state_value",
    "ensemble_critic_loss",
    "redq_subset",
    "redq_target_value",
    "sac_actor_loss",
    "sac_critic_loss",
    "sac_target_entropy",
    "sac_temperature_loss",
    "smoothed_target_action",
    "soft_state_value",
    "td3_actor_loss",
    "td3_critic_loss",
    "td3_smoothing_noise",
    # target
    "hard_update",
    "periodic_update",
    "polyak",
]
