"""Reading and planting the learning rates that agents keep in their optimiser states.

Each agent's optimiser is ``funrl.optim.inject_hyperparams(adam)`` (PPO's inside a chain), so a
learning rate is a tensor of the train state: these helpers find every such state in a pytree.
"""

from __future__ import annotations

from typing import Any

import optree
import torch

from funrl.optim import InjectHyperparamsState


def _is_injected(node: Any) -> bool:
    return isinstance(node, InjectHyperparamsState)


def learning_rates(tree: Any) -> list[torch.Tensor]:
    """The ``learning_rate`` tensor of every injected optimiser state in ``tree``, in tree order."""
    nodes = optree.tree_leaves(tree, is_leaf=_is_injected, namespace="funrl")
    return [n.hyperparams["learning_rate"] for n in nodes if _is_injected(n) and "learning_rate" in n.hyperparams]


def with_learning_rate(tree: Any, value: torch.Tensor) -> Any:
    """``tree`` with the ``learning_rate`` of every injected optimiser state replaced by ``value``."""

    def plant(node: Any) -> Any:
        if _is_injected(node) and "learning_rate" in node.hyperparams:
            return node._replace(hyperparams={**node.hyperparams, "learning_rate": value})
        return node

    return optree.tree_map(plant, tree, is_leaf=_is_injected, namespace="funrl")
