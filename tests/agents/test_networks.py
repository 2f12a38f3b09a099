"""The agents' networks by observation shape: MinAtar's CNN for [H, W, C] frames, an MLP otherwise;
observations of any dtype are cast at the network's input."""

from __future__ import annotations

import pytest
import torch

from funrl import nets, random
from funrl.agents.networks import Encoded, FlattenObservation, make_network
from funrl.nets.modules import MinAtarCNN


def q_network(obs_shape: tuple[int, ...], network: str = "auto") -> Encoded:
    return make_network(network, obs_shape, (32,), lambda n, hidden: nets.QNetwork(n, 3, hidden))


def test_auto_picks_minatars_cnn_for_frames_and_an_mlp_otherwise() -> None:
    frames = q_network((10, 10, 4))
    assert isinstance(frames.encoder, MinAtarCNN)
    shapes = {k: tuple(v.shape) for k, v in nets.init(frames, random.key(0)).items()}
    # MinAtar's baseline: conv 16 x 3x3 (no padding), dense 128, then the head's one linear layer.
    assert shapes == {
        "encoder.conv.weight": (16, 4, 3, 3),
        "encoder.conv.bias": (16,),
        "encoder.dense.weight": (128, 16 * 8 * 8),
        "encoder.dense.bias": (128,),
        "head.mlp.0.weight": (3, 128),
        "head.mlp.0.bias": (3,),
    }
    for obs_shape in ((4,), (10, 5)):  # CartPole's vector, bsuite's Catch grid
        net = q_network(obs_shape)
        assert isinstance(net.encoder, FlattenObservation)
        assert nets.init(net, random.key(0))["head.mlp.0.weight"].shape == (
            32,
            4 if obs_shape == (4,) else 50,
        )
    assert isinstance(q_network((10, 10, 4), "mlp").encoder, FlattenObservation)


def test_bool_frames_are_cast_and_read_channels_last() -> None:
    net = q_network((10, 10, 4))
    params = nets.init(net, random.key(1))
    frames = random.uniform(random.key(2), (5, 10, 10, 4)) < 0.3
    q = nets.apply(net, params, frames)
    assert q.dtype == torch.float32 and q.shape == (5, 3)
    # The same numbers as the conv on channels-first floats, by hand.
    x = frames.to(torch.float32).permute(0, 3, 1, 2)
    h = torch.nn.functional.conv2d(x, params["encoder.conv.weight"], params["encoder.conv.bias"]).relu()
    h = (h.flatten(1) @ params["encoder.dense.weight"].T + params["encoder.dense.bias"]).relu()
    torch.testing.assert_close(q, h @ params["head.mlp.0.weight"].T + params["head.mlp.0.bias"])
    # Leading batch dims of any number, including none.
    torch.testing.assert_close(nets.apply(net, params, frames[0]), q[0])
    assert nets.apply(net, params, frames.reshape(5, 1, 10, 10, 4)).shape == (5, 1, 3)


def test_an_mlp_takes_bool_frames_flattened() -> None:
    net = q_network((10, 10, 4), "mlp")
    params = nets.init(net, random.key(1))
    frames = random.uniform(random.key(2), (5, 10, 10, 4)) < 0.3
    q = nets.apply(net, params, frames)
    head = nets.subparams(params, "head")
    torch.testing.assert_close(q, nets.apply(net.head, head, frames.to(torch.float32).reshape(5, 400)))


def test_bad_network_choices_are_clear_errors() -> None:
    with pytest.raises(
        ValueError, match=r"network: expected one of \('auto', 'mlp', 'minatar_cnn'\), got 'cnn'"
    ):
        q_network((10, 10, 4), "cnn")
    with pytest.raises(ValueError, match=r"network: 'minatar_cnn' takes channels-last \[H, W, C\]"):
        q_network((4,), "minatar_cnn")
    net = q_network((10, 10, 4))
    with pytest.raises(
        ValueError, match=r"x: expected shape \[\.\.\., 10, 10, 4\] \(channels last\), got \[2, 4, 10, 10\]"
    ):
        nets.apply(net, nets.init(net, random.key(0)), torch.zeros(2, 4, 10, 10))


@pytest.mark.parametrize("algo", ["ppo", "dqn", "sac", "td3"])
def test_every_config_checks_its_network(algo: str) -> None:
    from funrl.agents import get_agent

    with pytest.raises(ValueError, match=r"network: expected one of"):
        get_agent(algo).config_type(network="cnn")
