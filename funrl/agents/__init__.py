"""End-to-end agents: ``make_train(config) -> train(key) -> (train_state, metrics)``."""

from funrl.agents import dqn, ppo, sac, td3
from funrl.agents.common import Agent, NonFiniteError, evaluate, train

__all__ = ["Agent", "NonFiniteError", "dqn", "evaluate", "ppo", "sac", "td3", "train"]
