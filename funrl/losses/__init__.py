"""funrl.losses: value estimators and losses as plain functions returning ``(loss, metrics)``.

Time-major ``[T, ...]`` estimators keep ``terminated`` (no bootstrap) and ``done = terminated |
truncated`` (trace cut) apart and take ``next_values`` explicitly. Input checks are static (shapes,
dtypes, Python numbers), so every function works under ``torch.func.vmap`` and ``torch.compile``.
Float hyper-parameters (γ, λ, clip ε, coefficients, τ, α, ...) are Python floats or float tensors
(0-d, or batched under ``vmap``) and no function branches on their values, so a compiled step that
carries them as tensors compiles once whatever their values.

One module per family: ``returns`` (value estimators), ``policy_gradient`` (PPO, A2C, REINFORCE),
``value_based`` (DQN family), ``bellman`` (what the actor-critic losses share), ``td3`` (and
DDPG), ``sac``, ``discrete_sac``, ``redq``, ``crossq``, ``offline`` (BC, CQL, IQL, TD3+BC),
``sequence`` (DPO, GRPO) and ``target`` (target-network updates).
"""

from funrl.losses.bellman import bellman_target, ensemble_critic_loss, ensemble_q, soft_state_value
from funrl.losses.crossq import crossq_actor_objective, crossq_critic_objective, crossq_target
from funrl.losses.discrete_sac import (
    discrete_sac_actor_loss,
    discrete_sac_actor_objective,
    discrete_sac_critic_loss,
    discrete_sac_critic_objective,
    discrete_sac_target_entropy,
    discrete_soft_state_value,
)
from funrl.losses.offline import (
    bc_log_likelihood_loss,
    bc_mse_loss,
    bc_objective,
    cql_critic_objective,
    cql_lagrange_loss,
    cql_regularizer,
    discrete_cql_regularizer,
    expectile_loss,
    iql_actor_loss,
    iql_actor_objective,
    iql_critic_loss,
    iql_critic_objective,
    iql_value_loss,
    iql_value_objective,
    td3_bc_actor_loss,
    td3_bc_actor_objective,
)
from funrl.losses.policy_gradient import (
    a2c_loss,
    normalize_advantages,
    ppo_clip_loss,
    ppo_loss,
    ppo_value_loss,
    reinforce_loss,
)
from funrl.losses.redq import (
    redq_actor_loss,
    redq_actor_objective,
    redq_critic_objective,
    redq_subset,
    redq_target_value,
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
from funrl.losses.sac import (
    sac_actor_loss,
    sac_actor_objective,
    sac_critic_loss,
    sac_critic_objective,
    sac_target_entropy,
    sac_temperature_loss,
)
from funrl.losses.sequence import (
    dpo_loss,
    group_relative_advantages,
    grpo_loss,
    kl_k3,
    sequence_log_prob,
)
from funrl.losses.target import hard_update, periodic_update, polyak
from funrl.losses.td3 import (
    ddpg_actor_loss,
    ddpg_actor_objective,
    ddpg_critic_loss,
    ddpg_critic_objective,
    smoothed_target_action,
    td3_actor_loss,
    td3_actor_objective,
    td3_critic_loss,
    td3_critic_objective,
    td3_smoothing_noise,
)
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
    # bellman (shared by the actor-critic losses)
    "bellman_target",
    "ensemble_critic_loss",
    "ensemble_q",
    "soft_state_value",
    # td3 (and ddpg)
    "ddpg_actor_loss",
    "ddpg_actor_objective",
    "ddpg_critic_loss",
    "ddpg_critic_objective",
    "smoothed_target_action",
    "td3_actor_loss",
    "td3_actor_objective",
    "td3_critic_loss",
    "td3_critic_objective",
    "td3_smoothing_noise",
    # sac
    "sac_actor_loss",
    "sac_actor_objective",
    "sac_critic_loss",
    "sac_critic_objective",
    "sac_target_entropy",
    "sac_temperature_loss",
    # discrete_sac
    "discrete_sac_actor_loss",
    "discrete_sac_actor_objective",
    "discrete_sac_critic_loss",
    "discrete_sac_critic_objective",
    "discrete_sac_target_entropy",
    "discrete_soft_state_value",
    # redq
    "redq_actor_loss",
    "redq_actor_objective",
    "redq_critic_objective",
    "redq_subset",
    "redq_target_value",
    # crossq
    "crossq_actor_objective",
    "crossq_critic_objective",
    "crossq_target",
    # offline
    "bc_log_likelihood_loss",
    "bc_mse_loss",
    "cql_regularizer",
    "cql_lagrange_loss",
    "discrete_cql_regularizer",
    "expectile_loss",
    "iql_value_loss",
    "iql_critic_loss",
    "iql_actor_loss",
    "td3_bc_actor_loss",
    "bc_objective",
    "cql_critic_objective",
    "iql_value_objective",
    "iql_critic_objective",
    "iql_actor_objective",
    "td3_bc_actor_objective",
    # sequence
    "sequence_log_prob",
    "dpo_loss",
    "group_relative_advantages",
    "kl_k3",
    "grpo_loss",
    # target
    "hard_update",
    "periodic_update",
    "polyak",
]
