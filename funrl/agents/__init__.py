"""End-to-end agents: ``make_train(config) -> train(key) -> (train_state, metrics)``."""

from funrl.agents import ppo
from funrl.agents.common import Agent, NonFiniteError, evaluate, train

__all__ = ["Agent", "NonFiniteError", "evaluate", "ppo", "train"]
