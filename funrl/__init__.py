"""funrl: pure-functional reinforcement learning for PyTorch."""

from funrl import buffers, control, nets, optim, random, tree

__version__ = "0.1.0"

__all__ = ["buffers", "control", "nets", "optim", "random", "tree", "__version__"]
