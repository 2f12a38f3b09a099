"""funrl: pure-functional reinforcement learning for PyTorch."""

from funrl import control, nets, optim, random, tree

__version__ = "0.1.0"

__all__ = ["control", "nets", "optim", "random", "tree", "__version__"]
