"""The networks agents build: an observation encoder chosen by the observation's shape, then heads.

Every agent's network is ``Encoded(encoder, head)``: the encoder turns an observation
``[..., *obs_shape]`` of any dtype (MinAtar's are bool) into float32 features ``[..., F]``, and the
head is the agent's usual MLP network (actor-critic, Q-network, actor, critic) on those features.

``network`` (a config field) picks the encoder:

- ``"mlp"``: flatten the observation; the head has the config's ``hidden_sizes``;
- ``"minatar_cnn"``: MinAtar's baseline CNN (:class:`funrl.nets.modules.MinAtarCNN`: one 3x3 conv
  of 16 channels, a dense layer of 128) for channels-last ``[H, W, C]`` observations; its dense
  layer is the hidden layer, so each head is one linear layer (MinAtar's baselines);
- ``"auto"`` (the default): ``"minatar_cnn"`` for observations of three dims, ``"mlp"`` otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from funrl.nets.modules import MinAtarCNN

__all__ = ["NETWORKS", "Encoded", "EncodedCritic", "FlattenObservation", "check_network", "make_network"]

NETWORKS = ("auto", "mlp", "minatar_cnn")


class FlattenObservation(nn.Module):
    """``[..., *obs_shape] -> [..., prod(obs_shape)]`` as float32: the input an MLP takes."""

    def __init__(self, obs_shape: Sequence[int]):
        super().__init__()
        self.obs_shape = tuple(obs_shape)
        if not self.obs_shape:
            raise ValueError("obs_shape: expected at least one dim, got ()")
        self.out_features = math.prod(self.obs_shape)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return obs.flatten(-len(self.obs_shape)).to(torch.float32)


class Encoded(nn.Module):
    """``head(encoder(obs))``: an actor, an actor-critic or a Q-network on encoded observations."""

    def __init__(self, encoder: nn.Module, head: nn.Module):
        super().__init__()
        self.encoder = encoder
        self.head = head

    def forward(self, obs: torch.Tensor, **head_kwargs: Any) -> Any:
        return self.head(self.encoder(obs), **head_kwargs)


class EncodedCritic(Encoded):
    """``head(encoder(obs), action)``: a critic ``Q(s, a)`` on encoded observations."""

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return self.head(self.encoder(obs), action)


def check_network(network: Any) -> None:
    """A ValueError naming ``network`` unless it is one of :data:`NETWORKS`."""
    if network not in NETWORKS:
        raise ValueError(f"network: expected one of {NETWORKS}, got {network!r}")


def make_network(
    network: str,
    obs_shape: Sequence[int],
    hidden_sizes: Sequence[int],
    head: Callable[[int, tuple[int, ...]], nn.Module],
    critic: bool = False,
) -> Encoded:
    """``Encoded(encoder, head(features, hidden))`` for observations of shape ``obs_shape``
    (``EncodedCritic`` with ``critic=True``: a head that also takes the action).

    ``head(in_features, hidden_sizes)`` builds the agent's head; it gets ``hidden_sizes`` after a
    flattening encoder and ``()`` after MinAtar's CNN, whose dense layer is the hidden layer.
    """
    check_network(network)
    obs_shape = tuple(obs_shape)
    if network == "auto":
        network = "minatar_cnn" if len(obs_shape) == 3 else "mlp"
    if network == "mlp":
        encoder: nn.Module = FlattenObservation(obs_shape)
        hidden = tuple(hidden_sizes)
    else:
        if len(obs_shape) != 3:
            raise ValueError(
                f"network: 'minatar_cnn' takes channels-last [H, W, C] observations, got shape {list(obs_shape)}"
            )
        encoder, hidden = MinAtarCNN(*obs_shape), ()
    return (EncodedCritic if critic else Encoded)(encoder, head(encoder.out_features, hidden))
