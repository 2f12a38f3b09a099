"""End-to-end agents: ``make_train(config) -> agent``, ``agent(key) -> (train_state, metrics)``.

Every module of this package is imported here, so each agent file's ``register_agent`` call has
run once ``funrl.agents`` is imported: adding an agent is adding its file (see
:mod:`funrl.agents.registry`).
"""

import importlib
import pkgutil

from funrl.agents.common import Agent, NonFiniteError, evaluate, train
from funrl.agents.registry import AgentSpec, get_agent, register_agent, registered_agents

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "Agent",
    "AgentSpec",
    "NonFiniteError",
    "evaluate",
    "get_agent",
    "register_agent",
    "registered_agents",
    "train",
]
