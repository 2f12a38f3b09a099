"""Ready network skeletons for RL: MLP, the Nature-DQN CNN, and actor / critic heads.

Every module here is an ordinary ``nn.Module`` built on the ``meta`` device by default (no weights,
no draws from torch's RNG); give it values with ``funrl.nets.init`` and run it with
``funrl.nets.apply``. Pass ``device="cpu"`` to build a conventional module with torch's own
initial weights. Layer names follow CleanRL's (an ``MLP`` is an ``nn.Sequential``: its output layer
is ``"{len - 1}"``, e.g. ``"actor.4"`` for CleanRL's PPO actor), so per-layer overrides read the same.
Every single-head module names the path of its last ``Linear`` in ``output_layer`` (``"mlp.4"``,
``"head"``), ready for ``init(..., overrides={net.output_layer: orthogonal(0.01)})``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn as nn

from funrl.nets import initializers as inits

__all__ = [
    "ACTIVATIONS",
    "MLP",
    "NatureCNN",
    "MinAtarCNN",
    "ActorCritic",
    "DiscreteActor",
    "GaussianActor",
    "QNetwork",
    "ContinuousQ",
]

ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {
    "tanh": nn.Tanh,
    "relu": nn.ReLU,
    "elu": nn.ELU,
    "gelu": nn.GELU,
    "silu": nn.SiLU,
    "swish": nn.SiLU,
    "leaky_relu": nn.LeakyReLU,
    "sigmoid": nn.Sigmoid,
    "softplus": nn.Softplus,
    "identity": nn.Identity,
}

Activation = str | Callable[[], nn.Module]
Device = torch.device | str


def _activation(activation: Activation, name: str) -> nn.Module:
    if isinstance(activation, str):
        if activation not in ACTIVATIONS:
            raise ValueError(
                f"{name}: expected one of {sorted(ACTIVATIONS)} or a module class, got {activation!r}"
            )
        return ACTIVATIONS[activation]()
    if callable(activation):
        module = activation()
        if not isinstance(module, nn.Module):
            raise TypeError(
                f"{name}: expected a callable returning an nn.Module, got {type(module).__name__}"
            )
        return module
    raise TypeError(f"{name}: expected a name or an nn.Module class, got {type(activation).__name__}")


def _positive_int(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: expected a positive int, got {value!r}")
    return value


def _sizes(hidden_sizes: Sequence[int], name: str = "hidden_sizes") -> tuple[int, ...]:
    if isinstance(hidden_sizes, int) or not isinstance(hidden_sizes, Sequence):
        raise TypeError(f"{name}: expected a sequence of positive ints, got {hidden_sizes!r}")
    return tuple(_positive_int(h, f"{name}[{i}]") for i, h in enumerate(hidden_sizes))


class MLP(nn.Sequential):
    """Linear layers with an activation between them (and optionally LayerNorm before it).

    Layout: ``[Linear, (LayerNorm), act] * len(hidden_sizes) + [Linear, (output_activation)]``.
    ``output_layer`` is the name of the last ``Linear`` (``"4"`` for two hidden layers without
    layer norm), for per-layer initialiser overrides.

    Shapes: ``[..., in_features] -> [..., out_features]``.
    """

    def __init__(
        self,
        in_features: int,
        hidden_sizes: Sequence[int],
        out_features: int,
        activation: Activation = "tanh",
        layer_norm: bool = False,
        output_activation: Activation | None = None,
        device: Device = "meta",
    ):
        in_features = _positive_int(in_features, "in_features")
        out_features = _positive_int(out_features, "out_features")
        sizes = _sizes(hidden_sizes)
        layers: list[nn.Module] = []
        with torch.device(device):
            width = in_features
            for hidden in sizes:
                layers.append(nn.Linear(width, hidden))
                if layer_norm:
                    layers.append(nn.LayerNorm(hidden))
                layers.append(_activation(activation, "activation"))
                width = hidden
            layers.append(nn.Linear(width, out_features))
            if output_activation is not None:
                layers.append(_activation(output_activation, "output_activation"))
        super().__init__(*layers)
        self.in_features = in_features
        self.out_features = out_features
        self.output_layer = str(len(layers) - (2 if output_activation is not None else 1))


class NatureCNN(nn.Module):
    """The convolutional torso of Mnih et al. (2015), "Human-level control through deep RL".

    ``Conv(32, 8x8, stride 4) - ReLU - Conv(64, 4x4, stride 2) - ReLU - Conv(64, 3x3, stride 1) -
    ReLU - flatten - Linear(512) - ReLU``, then an optional ``Linear(out_features)`` head (``"head"``).

    Input: channels-first ``[..., C, H, W]`` (``[C, H, W]`` or ``[N, C, H, W]``), uint8 or float.
    With ``scale_input=True`` it is divided by 255 (Atari frames); otherwise cast to float as is.
    Output: ``[..., 512]`` features, or ``[..., out_features]`` with a head.
    """

    def __init__(
        self,
        in_channels: int = 4,
        height: int = 84,
        width: int = 84,
        out_features: int | None = None,
        scale_input: bool = True,
        features: int = 512,
        device: Device = "meta",
    ):
        super().__init__()
        in_channels = _positive_int(in_channels, "in_channels")
        out_h, out_w = _positive_int(height, "height"), _positive_int(width, "width")
        for kernel, stride in ((8, 4), (4, 2), (3, 1)):
            out_h, out_w = (out_h - kernel) // stride + 1, (out_w - kernel) // stride + 1
        if out_h < 1 or out_w < 1:
            raise ValueError(
                f"height, width: ({height}, {width}) is too small for the Nature CNN (min 36x36)"
            )
        with torch.device(device):
            self.conv = nn.Sequential(
                nn.Conv2d(in_channels, 32, 8, stride=4),
                nn.ReLU(),
                nn.Conv2d(32, 64, 4, stride=2),
                nn.ReLU(),
                nn.Conv2d(64, 64, 3, stride=1),
                nn.ReLU(),
            )
            self.dense = nn.Linear(64 * out_h * out_w, _positive_int(features, "features"))
            self.head = (
                None
                if out_features is None
                else nn.Linear(features, _positive_int(out_features, "out_features"))
            )
        self.in_shape = (in_channels, height, width)
        self.output_layer = "dense" if out_features is None else "head"
        self.scale_input = bool(scale_input)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() < 3 or tuple(x.shape[-3:]) != self.in_shape:
            raise ValueError(
                f"x: expected shape [..., {', '.join(map(str, self.in_shape))}], got {list(x.shape)}"
            )
        dtype = self.dense.weight.dtype
        x = x.to(dtype) / 255.0 if self.scale_input else x.to(dtype)
        batch = x.shape[:-3]
        h = self.conv(x.reshape(-1, *self.in_shape))
        h = torch.relu(self.dense(h.flatten(1)))
        if self.head is not None:
            h = self.head(h)
        return h.reshape(*batch, h.shape[-1])


class MinAtarCNN(nn.Module):
    """The network of MinAtar's baselines (Young & Tian 2019, "MinAtar: An Atari-inspired testbed").

    ``Conv(16, 3x3, stride 1, no padding) - ReLU - flatten - Linear(features=128) - ReLU``, then an
    optional ``Linear(out_features)`` head (``"head"``).

    Input: MinAtar's channels-last ``[..., H, W, C]`` (``[10, 10, C]``), bool or float, cast to the
    weights' dtype. Output: ``[..., features]``, or ``[..., out_features]`` with a head.
    """

    def __init__(
        self,
        height: int = 10,
        width: int = 10,
        in_channels: int = 4,
        out_features: int | None = None,
        features: int = 128,
        channels: int = 16,
        device: Device = "meta",
    ):
        super().__init__()
        height, width = _positive_int(height, "height"), _positive_int(width, "width")
        if height < 3 or width < 3:
            raise ValueError(
                f"height, width: expected at least 3x3 for a 3x3 kernel, got ({height}, {width})"
            )
        in_channels = _positive_int(in_channels, "in_channels")
        channels = _positive_int(channels, "channels")
        with torch.device(device):
            self.conv = nn.Conv2d(in_channels, channels, 3, stride=1)
            self.dense = nn.Linear(channels * (height - 2) * (width - 2), _positive_int(features, "features"))
            self.head = (
                None
                if out_features is None
                else nn.Linear(features, _positive_int(out_features, "out_features"))
            )
        self.in_shape = (height, width, in_channels)
        self.out_features = features if out_features is None else out_features
        self.output_layer = "dense" if out_features is None else "head"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() < 3 or tuple(x.shape[-3:]) != self.in_shape:
            raise ValueError(
                f"x: expected shape [..., {', '.join(map(str, self.in_shape))}] (channels last), "
                f"got {list(x.shape)}"
            )
        batch = x.shape[:-3]
        x = x.to(self.dense.weight.dtype).reshape(-1, *self.in_shape).permute(0, 3, 1, 2)  # to NCHW
        h = torch.relu(self.dense(torch.relu(self.conv(x)).flatten(1)))
        if self.head is not None:
            h = self.head(h)
        return h.reshape(*batch, h.shape[-1])


class DiscreteActor(nn.Module):
    """A policy over ``num_actions`` discrete actions: ``[..., obs_dim] -> logits [..., num_actions]``.

    Pair with ``funrl.nets.distributions.categorical``.
    """

    def __init__(
        self,
        obs_dim: int,
        num_actions: int,
        hidden_sizes: Sequence[int] = (64, 64),
        activation: Activation = "tanh",
        layer_norm: bool = False,
        device: Device = "meta",
    ):
        super().__init__()
        self.mlp = MLP(obs_dim, hidden_sizes, num_actions, activation, layer_norm, device=device)
        self.output_layer = f"mlp.{self.mlp.output_layer}"

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.mlp(obs)


_LOG_STD_MIN, _LOG_STD_MAX = -5.0, 2.0


class GaussianActor(nn.Module):
    """A diagonal Gaussian policy: ``[..., obs_dim] -> (loc, scale)``, each ``[..., action_dim]``.

    ``state_dependent_std=False`` (PPO, as CleanRL's continuous PPO): ``scale = exp(log_std)`` with a
    learned parameter ``log_std`` of shape ``[action_dim]`` (initialised to ``log_std_init``),
    broadcast over the batch. ``state_dependent_std=True`` (SAC, as CleanRL's SAC actor): the network
    outputs ``2 * action_dim`` values, ``loc`` and a raw log-std squashed by ``tanh`` into
    ``[log_std_min, log_std_max]``. Pair with ``distributions.normal`` or ``distributions.tanh_normal``.
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden_sizes: Sequence[int] = (64, 64),
        activation: Activation = "tanh",
        state_dependent_std: bool = False,
        log_std_init: float = 0.0,
        log_std_min: float = _LOG_STD_MIN,
        log_std_max: float = _LOG_STD_MAX,
        layer_norm: bool = False,
        device: Device = "meta",
    ):
        super().__init__()
        self.action_dim = _positive_int(action_dim, "action_dim")
        if not log_std_max > log_std_min:
            raise ValueError(f"log_std_max: expected > log_std_min={log_std_min}, got {log_std_max}")
        self.state_dependent_std = bool(state_dependent_std)
        self.log_std_min, self.log_std_max = float(log_std_min), float(log_std_max)
        self.log_std_init = float(log_std_init)
        out = 2 * action_dim if state_dependent_std else action_dim
        self.mlp = MLP(obs_dim, hidden_sizes, out, activation, layer_norm, device=device)
        self.output_layer = f"mlp.{self.mlp.output_layer}"
        if not state_dependent_std:
            self.log_std = nn.Parameter(torch.full((action_dim,), self.log_std_init, device=device))

    def funrl_initializers(self) -> dict[str, inits.InitFn]:
        return {} if self.state_dependent_std else {"log_std": inits.constant(self.log_std_init)}

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.mlp(obs)
        if self.state_dependent_std:
            loc, raw = out[..., : self.action_dim], out[..., self.action_dim :]  # FX-traceable split
            half_range = 0.5 * (self.log_std_max - self.log_std_min)
            log_std = self.log_std_min + half_range * (torch.tanh(raw) + 1.0)
            return loc, log_std.exp()
        return out, self.log_std.exp().expand_as(out)


class ActorCritic(nn.Module):
    """Separate actor and critic MLPs, as CleanRL's PPO ``Agent``.

    ``forward(obs) -> (policy, value)`` and ``forward(obs, value=False) -> policy``: ``policy`` is
    logits ``[..., action_dim]`` (discrete) or ``(loc, scale)`` (``continuous=True``,
    state-independent ``log_std`` parameter), and ``value`` is ``[...]``. The heads are
    ``actor.{actor.output_layer}`` and ``critic.{critic.output_layer}``; :meth:`ppo_overrides`
    gives CleanRL's head gains for ``init``:

        init(ac, key, orthogonal(2**0.5), ac.ppo_overrides())
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden_sizes: Sequence[int] = (64, 64),
        activation: Activation = "tanh",
        continuous: bool = False,
        log_std_init: float = 0.0,
        layer_norm: bool = False,
        device: Device = "meta",
    ):
        super().__init__()
        self.continuous = bool(continuous)
        self.log_std_init = float(log_std_init)
        self.actor = MLP(obs_dim, hidden_sizes, action_dim, activation, layer_norm, device=device)
        self.critic = MLP(obs_dim, hidden_sizes, 1, activation, layer_norm, device=device)
        if continuous:
            self.log_std = nn.Parameter(torch.full((action_dim,), self.log_std_init, device=device))

    def funrl_initializers(self) -> dict[str, inits.InitFn]:
        return {"log_std": inits.constant(self.log_std_init)} if self.continuous else {}

    def ppo_overrides(
        self, actor_gain: float = 0.01, critic_gain: float = 1.0
    ) -> dict[str, inits.Initializer]:
        """Orthogonal init of the policy head (gain 0.01) and value head (gain 1.0), zero biases."""
        return {
            f"actor.{self.actor.output_layer}": inits.orthogonal(actor_gain),
            f"critic.{self.critic.output_layer}": inits.orthogonal(critic_gain),
        }

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def forward(self, obs: torch.Tensor, value: bool = True):
        """``(policy, value)``; ``value=False`` gives ``policy`` alone and skips the critic (a
        rollout's draws need only the policy)."""
        logits_or_loc = self.actor(obs)
        if self.continuous:
            policy = (logits_or_loc, self.log_std.exp().expand_as(logits_or_loc))
        else:
            policy = logits_or_loc
        return (policy, self.value(obs)) if value else policy


class QNetwork(nn.Module):
    """Discrete action values: ``[..., obs_dim] -> Q [..., num_actions]`` (CleanRL's DQN sizes by default)."""

    def __init__(
        self,
        obs_dim: int,
        num_actions: int,
        hidden_sizes: Sequence[int] = (120, 84),
        activation: Activation = "relu",
        layer_norm: bool = False,
        device: Device = "meta",
    ):
        super().__init__()
        self.mlp = MLP(obs_dim, hidden_sizes, num_actions, activation, layer_norm, device=device)
        self.output_layer = f"mlp.{self.mlp.output_layer}"

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.mlp(obs)


class ContinuousQ(nn.Module):
    """``Q(s, a)`` of a continuous action by concatenation: ``([..., obs_dim], [..., action_dim]) -> [...]``.

    As CleanRL's SAC/TD3 critics (two hidden layers of 256, ReLU, by default).
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden_sizes: Sequence[int] = (256, 256),
        activation: Activation = "relu",
        layer_norm: bool = False,
        device: Device = "meta",
    ):
        super().__init__()
        self.obs_dim = _positive_int(obs_dim, "obs_dim")
        self.action_dim = _positive_int(action_dim, "action_dim")
        self.mlp = MLP(obs_dim + action_dim, hidden_sizes, 1, activation, layer_norm, device=device)
        self.output_layer = f"mlp.{self.mlp.output_layer}"

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        _check_obs_and_action(obs, action, self.obs_dim, self.action_dim)
        return self.mlp(torch.cat([obs, action], dim=-1)).squeeze(-1)


def _check_obs_and_action(obs: torch.Tensor, action: torch.Tensor, obs_dim: int, action_dim: int) -> None:
    if obs.shape[-1] != obs_dim or action.shape[-1] != action_dim:
        raise ValueError(
            f"obs, action: expected last dims ({obs_dim}, {action_dim}), "
            f"got {list(obs.shape)} and {list(action.shape)}"
        )
    if obs.shape[:-1] != action.shape[:-1]:
        raise ValueError(
            "obs, action: expected the same batch shape, got "
            f"{list(obs.shape[:-1])} and {list(action.shape[:-1])}"
        )
