"""Stateless networks: ``nn.Module`` skeletons plus params dicts, initialisers, distributions.

Usage (``key`` from ``funrl.random.key``, ``orthogonal`` from ``funrl.nets.initializers``)::

    net = funrl.nets.MLP(4, [64, 64], 2)  # built on the meta device: no weights
    params = funrl.nets.init(net, key, orthogonal(2**0.5), {net.output_layer: orthogonal(0.01)})
    logits = funrl.nets.apply(net, params, obs)  # torch.func.functional_call
    ensemble = funrl.nets.init_ensemble(net, key, 10)  # leaves [10, ...]
    q = torch.func.vmap(funrl.nets.apply, in_dims=(None, 0, None))(net, ensemble, obs)
"""

from funrl.nets import distributions, initializers
from funrl.nets.core import (
    Params,
    apply,
    init,
    init_buffers,
    init_ensemble,
    param_key,
    skeleton,
    subparams,
)
from funrl.nets.initializers import Rule
from funrl.nets.modules import (
    ACTIVATIONS,
    MLP,
    ActorCritic,
    ContinuousQ,
    DiscreteActor,
    GaussianActor,
    NatureCNN,
    QNetwork,
)

__all__ = [
    "ACTIVATIONS",
    "MLP",
    "ActorCritic",
    "ContinuousQ",
    "DiscreteActor",
    "GaussianActor",
    "NatureCNN",
    "Params",
    "QNetwork",
    "Rule",
    "apply",
    "distributions",
    "init",
    "init_buffers",
    "init_ensemble",
    "initializers",
    "param_key",
    "skeleton",
    "subparams",
]
