"""funrl.nets: initialisers, init/apply over functional_call, skeletons, ready modules, ensembles."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
from hypothesis import given
from hypothesis import strategies as st

from funrl import nets, random, tree
from funrl.nets import initializers as inits

KEY = random.key(0)


# ---------------------------------------------------------------------------------------------
# Statistical checkers for initialisers (each has a planted-bug test below)
# ---------------------------------------------------------------------------------------------


def assert_std(x: torch.Tensor, expected: float, rtol: float = 0.03) -> None:
    """Sample std within ``rtol`` of ``expected`` and mean within 4 standard errors of zero."""
    x = x.double().flatten()
    std = x.std().item()
    assert abs(std - expected) <= rtol * expected, f"std {std} vs expected {expected}"
    assert abs(x.mean().item()) <= 4 * expected / math.sqrt(x.numel()), f"mean {x.mean().item()}"


def assert_uniform_bound(x: torch.Tensor, bound: float) -> None:
    """All values in ``[-bound, bound)``, and the extremes reach within 1% of both ends."""
    assert x.min().item() >= -bound and x.max().item() < bound, (x.min().item(), x.max().item(), bound)
    assert x.max().item() > 0.99 * bound and x.min().item() < -0.99 * bound
    assert_std(x, bound / math.sqrt(3.0))


def assert_orthogonal(w: torch.Tensor, gain: float, atol: float = 1e-5) -> None:
    """``W W^T = gain^2 I`` (rows <= cols) or ``W^T W = gain^2 I`` (rows > cols), W viewed 2-D."""
    flat = w.reshape(w.shape[0], -1).double()
    gram = flat @ flat.T if flat.shape[0] <= flat.shape[1] else flat.T @ flat
    eye = torch.eye(gram.shape[0], dtype=torch.float64)
    assert torch.allclose(gram, gain**2 * eye, atol=atol * max(gain**2, 1.0)), (
        (gram - gain**2 * eye).abs().max()
    )


def test_checkers_catch_planted_bugs():
    x = inits.normal(1.0)(KEY, (200, 200))
    assert_std(x, 1.0)
    with pytest.raises(AssertionError):
        assert_std(1.1 * x, 1.0)  # a 10% wrong scale
    with pytest.raises(AssertionError):
        assert_std(x + 0.1, 1.0)  # a shifted mean
    u = inits.uniform(-0.5, 0.5)(KEY, (200, 200))
    assert_uniform_bound(u, 0.5)
    with pytest.raises(AssertionError):
        assert_uniform_bound(u, 0.45)  # values beyond the bound
    with pytest.raises(AssertionError):
        assert_uniform_bound(0.9 * u, 0.5)  # never reaches the bound
    q = inits.orthogonal(2.0)(KEY, (16, 32))
    assert_orthogonal(q, 2.0)
    with pytest.raises(AssertionError):
        assert_orthogonal(q, 1.0)
    with pytest.raises(AssertionError):
        assert_orthogonal(q + 0.01, 2.0)


# ---------------------------------------------------------------------------------------------
# Initialisers
# ---------------------------------------------------------------------------------------------

SHAPE = (256, 400)  # fan_in 400, fan_out 256
CONV = (64, 32, 3, 3)  # fan_in 288, fan_out 576


@pytest.mark.parametrize("shape", [SHAPE, CONV])
def test_initializer_distributions_match_formulas(shape):
    fan_in, fan_out = inits.compute_fans(shape)
    assert_uniform_bound(inits.xavier_uniform(1.5)(KEY, shape), 1.5 * math.sqrt(6 / (fan_in + fan_out)))
    assert_std(inits.xavier_normal(1.5)(KEY, shape), 1.5 * math.sqrt(2 / (fan_in + fan_out)))
    assert_uniform_bound(inits.kaiming_uniform()(KEY, shape), math.sqrt(2) * math.sqrt(3 / fan_in))
    assert_uniform_bound(
        inits.kaiming_uniform(mode="fan_out", nonlinearity="tanh")(KEY, shape), 5 / 3 * math.sqrt(3 / fan_out)
    )
    assert_std(inits.kaiming_normal()(KEY, shape), math.sqrt(2 / fan_in))
    assert_std(
        inits.kaiming_normal(a=0.2, nonlinearity="leaky_relu")(KEY, shape), math.sqrt(2 / 1.04 / fan_in)
    )
    assert_uniform_bound(inits.lecun_uniform()(KEY, shape), math.sqrt(3 / fan_in))
    lecun = inits.lecun_normal()(KEY, shape)
    assert_std(lecun, math.sqrt(1 / fan_in))
    # Truncated at two standard deviations of the underlying (pre-rescaling) normal.
    assert lecun.abs().max().item() <= 2 * math.sqrt(1 / fan_in) / 0.87962566103423978 + 1e-6
    assert_uniform_bound(inits.torch_default()(KEY, shape), 1 / math.sqrt(fan_in))
    assert_std(inits.normal(0.3, mean=0.0)(KEY, shape), 0.3)


def test_torch_default_equals_torch_kaiming_uniform_a_sqrt5_bound():
    """nn.Linear's reset_parameters uses kaiming_uniform_(a=sqrt(5)): the same bound as torch_default."""
    for shape in (SHAPE, CONV):
        ours = inits.torch_default()(KEY, shape)
        same_rule = inits.kaiming_uniform(a=math.sqrt(5), nonlinearity="leaky_relu")(KEY, shape)
        torch.testing.assert_close(ours, same_rule)
        reference = torch.empty(shape)
        nn.init.kaiming_uniform_(reference, a=math.sqrt(5))
        bound = 1 / math.sqrt(inits.compute_fans(shape)[0])
        assert reference.abs().max() <= bound and ours.abs().max() <= bound


@pytest.mark.parametrize("gain", [1.0, math.sqrt(2), 0.01])
@pytest.mark.parametrize("shape", [(64, 64), (16, 64), (64, 16), (32, 8, 3, 3), (8, 32, 2)])
def test_orthogonal(gain, shape):
    w = inits.orthogonal(gain)(KEY, shape)
    assert w.shape == shape and w.dtype == torch.float32
    assert_orthogonal(w, gain)


def test_orthogonal_float64_and_errors():
    w = inits.orthogonal(1.0)(KEY, (20, 30), torch.float64)
    assert w.dtype == torch.float64
    assert_orthogonal(w, 1.0, atol=1e-12)
    with pytest.raises(ValueError, match="shape: orthogonal needs at least 2 dimensions"):
        inits.orthogonal()(KEY, (5,))


def test_constant_initializers():
    assert torch.equal(inits.zeros(KEY, (3, 2)), torch.zeros(3, 2))
    assert torch.equal(inits.ones(KEY, (4,), torch.float64), torch.ones(4, dtype=torch.float64))
    assert torch.equal(inits.constant(-0.5)(KEY, (2, 2)), torch.full((2, 2), -0.5))


@given(
    out_dim=st.integers(1, 9),
    in_dim=st.integers(1, 9),
    kernel=st.lists(st.integers(1, 4), max_size=3),
)
def test_compute_fans_and_gain_match_torch(out_dim, in_dim, kernel):
    shape = (out_dim, in_dim, *kernel)
    assert inits.compute_fans(shape) == nn.init._calculate_fan_in_and_fan_out(torch.empty(shape))
    for nonlinearity in ("linear", "sigmoid", "tanh", "relu", "selu"):
        assert inits.calculate_gain(nonlinearity) == pytest.approx(nn.init.calculate_gain(nonlinearity))
    assert inits.calculate_gain("leaky_relu", 0.3) == pytest.approx(nn.init.calculate_gain("leaky_relu", 0.3))


@pytest.mark.parametrize(
    "initializer",
    [
        inits.orthogonal(1.3),
        inits.xavier_uniform(),
        inits.xavier_normal(),
        inits.kaiming_uniform(),
        inits.kaiming_normal(),
        inits.lecun_normal(),
        inits.lecun_uniform(),
        inits.torch_default(),
        inits.normal(),
        inits.uniform(),
    ],
    ids=repr,
)
def test_initializers_are_pure_functions_of_the_key(initializer):
    shape = (12, 7)
    a = initializer(KEY, shape)
    torch.manual_seed(123)
    b = initializer(KEY, shape)
    assert torch.equal(a, b)
    assert not torch.equal(a, initializer(random.key(1), shape))
    keys = random.split(KEY, 3)
    batched = torch.func.vmap(lambda k: initializer(k, shape, torch.float32), randomness="error")(keys)
    torch.testing.assert_close(
        batched, torch.stack([initializer(k, shape) for k in keys]), rtol=1e-6, atol=1e-6
    )
    assert initializer(KEY, shape, torch.float64).dtype == torch.float64


def test_initializer_errors():
    with pytest.raises(TypeError, match="dtype: expected a floating torch.dtype"):
        inits.xavier_uniform()(KEY, (2, 2), torch.int64)
    with pytest.raises(ValueError, match="shape: expected non-negative sizes"):
        inits.zeros(KEY, (-1, 2))
    with pytest.raises(ValueError, match="mode: expected"):
        inits.kaiming_normal(mode="fan_middle")
    with pytest.raises(ValueError, match="nonlinearity: expected"):
        inits.kaiming_uniform(nonlinearity="softsign")
    with pytest.raises(ValueError, match="maxval"):
        inits.uniform(1.0, 0.0)
    with pytest.raises(TypeError, match="key: expected dtype torch.int64"):
        inits.normal()(torch.zeros(2), (2,))


# ---------------------------------------------------------------------------------------------
# init
# ---------------------------------------------------------------------------------------------


def _real(module_factory, *args, **kwargs):
    """The same architecture built with storage on CPU (for comparisons with the module's forward)."""
    return module_factory(*args, **kwargs, device="cpu")


def test_init_names_shapes_dtypes_follow_named_parameters():
    ac = nets.ActorCritic(4, 3)
    params = nets.init(ac, KEY)
    assert list(params) == [n for n, _ in ac.named_parameters()]
    for name, p in ac.named_parameters():
        assert params[name].shape == p.shape and params[name].dtype == p.dtype
        assert params[name].device.type == "cpu" and not params[name].is_meta
    assert nets.init(ac, KEY, dtype=torch.float64)["actor.0.weight"].dtype == torch.float64


def test_init_is_pure_and_uses_no_global_rng():
    ac = nets.ActorCritic(4, 2, continuous=True)
    torch.manual_seed(0)
    state = torch.get_rng_state()
    a = nets.init(ac, KEY, inits.orthogonal(math.sqrt(2)), ac.ppo_overrides())
    assert torch.equal(torch.get_rng_state(), state), "init drew from torch's global generator"
    torch.manual_seed(999)
    b = nets.init(ac, KEY, inits.orthogonal(math.sqrt(2)), ac.ppo_overrides())
    assert tree.tree_equal(a, b)
    c = nets.init(ac, random.key(1), inits.orthogonal(math.sqrt(2)), ac.ppo_overrides())
    for name in a:
        if name.endswith("weight"):
            assert not torch.equal(a[name], c[name]), name
        else:  # zero biases and the constant log-std do not depend on the key
            assert torch.equal(a[name], c[name]), name


def test_each_parameter_draws_from_its_own_name():
    mlp = nets.MLP(3, [5], 2)
    params = nets.init(mlp, KEY)
    torch.testing.assert_close(
        params["0.weight"], inits.torch_default()(nets.param_key(KEY, "0.weight"), (5, 3))
    )
    # Growing the network leaves the values of the layers it shares with the smaller one unchanged.
    bigger = nn.ModuleDict({"0": nn.Linear(3, 5), "9": nn.Linear(7, 7)})
    assert torch.equal(nets.init(bigger, KEY)["0.weight"], params["0.weight"])


def test_default_rule_is_torch_default_per_layer_kind():
    net = nets.skeleton(
        lambda: nn.ModuleDict(
            {
                "linear": nn.Linear(400, 300),
                "conv": nn.Conv2d(16, 32, 3),
                "norm": nn.LayerNorm(300),
                "bn": nn.BatchNorm1d(8),
                "emb": nn.Embedding(500, 64, padding_idx=3),
                "rnn": nn.GRU(10, 400),
            }
        )
    )
    params = nets.init(net, KEY)
    assert_uniform_bound(params["linear.weight"], 1 / math.sqrt(400))
    # Bias bound from the weight's fan-in (400), not from the bias length (300).
    assert params["linear.bias"].abs().max() < 1 / math.sqrt(400) < 1 / math.sqrt(300)
    assert params["linear.bias"].abs().max() > 0.95 / math.sqrt(400)
    assert_uniform_bound(params["conv.weight"], 1 / math.sqrt(16 * 9))
    assert params["conv.bias"].abs().max() <= 1 / math.sqrt(16 * 9)
    for norm in ("norm", "bn"):
        assert torch.equal(params[f"{norm}.weight"], torch.ones_like(params[f"{norm}.weight"]))
        assert torch.equal(params[f"{norm}.bias"], torch.zeros_like(params[f"{norm}.bias"]))
    assert torch.equal(params["emb.weight"][3], torch.zeros(64))
    assert_std(torch.cat([params["emb.weight"][:3], params["emb.weight"][4:]]), 1.0)
    for name in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"):
        assert params[f"rnn.{name}"].abs().max() <= 1 / math.sqrt(400), name
    assert_uniform_bound(params["rnn.weight_hh_l0"], 1 / math.sqrt(400))


def test_initializer_rule_and_per_layer_overrides_as_cleanrl_ppo():
    """CleanRL's PPO layer_init: orthogonal sqrt(2) hidden, 0.01 actor head, 1.0 critic head, zero biases."""
    ac = nets.ActorCritic(8, 4, hidden_sizes=(64, 64), layer_norm=True)
    assert ac.actor.output_layer == "6"  # Linear, LayerNorm, Tanh, Linear, LayerNorm, Tanh, Linear
    params = nets.init(ac, KEY, inits.orthogonal(math.sqrt(2)), ac.ppo_overrides())
    for part in ("actor", "critic"):
        for layer in ("0", "3"):
            assert_orthogonal(params[f"{part}.{layer}.weight"], math.sqrt(2))
        for layer in ("1", "4"):  # LayerNorm keeps weight 1, bias 0 under any rule
            assert torch.equal(params[f"{part}.{layer}.weight"], torch.ones(64))
    assert_orthogonal(params["actor.6.weight"], 0.01)
    assert_orthogonal(params["critic.6.weight"], 1.0)
    for name, value in params.items():
        if name.endswith("bias"):
            assert torch.equal(value, torch.zeros_like(value)), name


def test_override_prefix_matching_exact_names_and_rules():
    net = nets.skeleton(nn.Sequential, *[nn.Linear(6, 6) for _ in range(12)])
    params = nets.init(net, KEY, inits.zeros, {"1": inits.ones, "1.bias": inits.constant(3.0)})
    assert torch.equal(params["1.weight"], torch.ones(6, 6))
    assert torch.equal(params["1.bias"], torch.full((6,), 3.0))  # exact name: used as is
    for other in ("10", "11", "0"):  # "1" is a path component prefix, not a string prefix
        assert torch.equal(params[f"{other}.weight"], torch.zeros(6, 6)), other
    # Rule(bias=None) keeps torch's default bias; a rule given as a plain init_fn zeroes biases.
    kept = nets.init(net, KEY, nets.Rule(weight=inits.orthogonal()))
    assert kept["0.bias"].abs().max() > 0 and kept["0.bias"].abs().max() <= 1 / math.sqrt(6)
    assert_orthogonal(kept["0.weight"], 1.0)


def test_module_declared_initializers_and_exact_override_precedence():
    actor = nets.GaussianActor(3, 2, log_std_init=-0.5)
    params = nets.init(actor, KEY, inits.orthogonal())
    assert torch.equal(params["log_std"], torch.full((2,), -0.5))
    params = nets.init(actor, KEY, overrides={"log_std": inits.constant(0.25)})
    assert torch.equal(params["log_std"], torch.full((2,), 0.25))


class _Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 3)
        self.temperature = nn.Parameter(torch.ones(()))

    def forward(self, x):
        return self.linear(x) * self.temperature


def test_init_errors_name_the_argument():
    mlp = nets.MLP(2, [4], 1)
    with pytest.raises(TypeError, match="module: expected a torch.nn.Module, got function"):
        nets.init(lambda x: x, KEY)
    with pytest.raises(TypeError, match="key: expected dtype torch.int64, got torch.float32"):
        nets.init(mlp, torch.zeros(2))
    with pytest.raises(ValueError, match=r"key: expected shape \[2\]"):
        nets.init(mlp, random.split(KEY, 3))
    with pytest.raises(TypeError, match="key: expected a key tensor"):
        nets.init(mlp, 0)
    with pytest.raises(TypeError, match="initializer: got the initialiser factory orthogonal; call it"):
        nets.init(mlp, KEY, inits.orthogonal)
    with pytest.raises(TypeError, match="initializer: expected an initialiser"):
        nets.init(mlp, KEY, 0.01)
    with pytest.raises(ValueError, match="overrides: 'actor.4' matches no parameter of MLP"):
        nets.init(mlp, KEY, overrides={"actor.4": inits.zeros})
    with pytest.raises(TypeError, match=r"overrides\['2'\]: got the initialiser factory xavier_normal"):
        nets.init(mlp, KEY, overrides={"2": inits.xavier_normal})
    with pytest.raises(TypeError, match="dtype: expected a floating torch.dtype"):
        nets.init(mlp, KEY, dtype=torch.int32)
    bad = inits.Initializer(lambda key, shape, dtype: torch.zeros(3), "bad")
    with pytest.raises(ValueError, match=r"initializer for '0.weight': expected a tensor of shape \[4, 2\]"):
        nets.init(mlp, KEY, bad)
    with pytest.raises(ValueError, match="no default initialiser for parameter 'temperature'"):
        nets.init(nets.skeleton(_Scaled), KEY)
    params = nets.init(nets.skeleton(_Scaled), KEY, overrides={"temperature": inits.ones})
    assert torch.equal(params["temperature"], torch.ones(()))


# ---------------------------------------------------------------------------------------------
# Skeletons and apply
# ---------------------------------------------------------------------------------------------


def test_skeletons_hold_no_storage_and_draw_nothing():
    torch.manual_seed(0)
    state = torch.get_rng_state()
    modules = [
        nets.MLP(4, [64, 64], 2, layer_norm=True),
        nets.NatureCNN(out_features=6),
        nets.ActorCritic(4, 2, continuous=True),
        nets.GaussianActor(3, 2, state_dependent_std=True),
        nets.DiscreteActor(3, 2),
        nets.QNetwork(4, 2),
        nets.ContinuousQ(3, 1),
        nets.skeleton(nn.Conv2d, 3, 8, 3),
    ]
    assert torch.equal(torch.get_rng_state(), state), "building a skeleton drew from torch's generator"
    for module in modules:
        tensors = list(module.parameters()) + list(module.buffers())
        assert tensors and all(t.is_meta for t in tensors), type(module).__name__
    real = nn.Linear(3, 2)
    meta = nets.skeleton(real)
    assert meta.weight.is_meta and not real.weight.is_meta  # the original keeps its weights


def _copy_into(module: nn.Module, params: dict) -> nn.Module:
    module.load_state_dict(params, strict=False)
    missing = {n for n, _ in module.named_parameters()} - set(params)
    assert not missing, missing
    return module


@given(
    in_features=st.integers(1, 6),
    hidden=st.lists(st.integers(1, 8), max_size=3),
    out_features=st.integers(1, 4),
    activation=st.sampled_from(["tanh", "relu", "gelu", "silu", nn.ELU]),
    layer_norm=st.booleans(),
    output_activation=st.sampled_from([None, "sigmoid"]),
    seed=st.integers(0, 2**31),
)
def test_mlp_apply_equals_forward(
    in_features, hidden, out_features, activation, layer_norm, output_activation, seed
):
    config = dict(activation=activation, layer_norm=layer_norm, output_activation=output_activation)
    skeleton = nets.MLP(in_features, hidden, out_features, **config)
    params = nets.init(skeleton, random.key(seed), inits.xavier_normal())
    assert tree.tree_equal(params, nets.init(skeleton, random.key(seed), inits.xavier_normal()))
    module = _copy_into(nets.MLP(in_features, hidden, out_features, **config, device="cpu"), params)
    x = random.normal(random.key(seed + 1), (5, in_features))
    with torch.no_grad():
        torch.testing.assert_close(nets.apply(skeleton, params, x), module(x))
    assert isinstance(module[int(skeleton.output_layer)], nn.Linear)
    n_layers = len(hidden) * (3 if layer_norm else 2) + 1 + (output_activation is not None)
    assert len(skeleton) == n_layers


@pytest.mark.parametrize(
    "factory, inputs",
    [
        (lambda **kw: nets.ActorCritic(4, 3, **kw), lambda: (torch.randn(5, 4),)),
        (
            lambda **kw: nets.ActorCritic(4, 2, continuous=True, log_std_init=-1.0, **kw),
            lambda: (torch.randn(5, 4),),
        ),
        (lambda **kw: nets.DiscreteActor(4, 3, **kw), lambda: (torch.randn(5, 4),)),
        (lambda **kw: nets.GaussianActor(4, 2, **kw), lambda: (torch.randn(5, 4),)),
        (lambda **kw: nets.GaussianActor(4, 2, state_dependent_std=True, **kw), lambda: (torch.randn(5, 4),)),
        (lambda **kw: nets.QNetwork(4, 3, **kw), lambda: (torch.randn(5, 4),)),
        (lambda **kw: nets.ContinuousQ(4, 2, **kw), lambda: (torch.randn(5, 4), torch.randn(5, 2))),
        (
            lambda **kw: nets.NatureCNN(4, 84, 84, out_features=6, **kw),
            lambda: (torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8),),
        ),
    ],
    ids=["ac", "ac-continuous", "discrete", "gaussian", "gaussian-sd", "q", "continuous-q", "nature-cnn"],
)
def test_heads_apply_equals_forward(factory, inputs):
    torch.manual_seed(0)
    skeleton = factory()
    params = nets.init(skeleton, KEY)
    module = _copy_into(factory(device="cpu"), params)
    args = inputs()
    with torch.no_grad():
        got, want = nets.apply(skeleton, params, *args), module(*args)
    tree.check_same_structure(got, want)
    assert tree.tree_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_actor_critic_without_value_gives_the_policy_and_skips_the_critic():
    obs = torch.randn(7, 4)

    def linear_layers_run(*args, **kwargs):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            out = nets.apply(*args, **kwargs)
        return out, sum(e.count for e in prof.key_averages() if e.key == "aten::addmm")

    for ac in (nets.ActorCritic(4, 3), nets.ActorCritic(4, 2, continuous=True)):
        p = nets.init(ac, KEY)
        (policy, _), both = linear_layers_run(ac, p, obs)
        alone, actor_only = linear_layers_run(ac, p, obs, value=False)
        assert tree.tree_equal(alone, policy)
        assert (both, actor_only) == (6, 3)  # two MLPs of three layers each, then the actor's


def test_head_shapes_and_semantics():
    obs = torch.randn(7, 4)
    ac = nets.ActorCritic(4, 3)
    p = nets.init(ac, KEY)
    logits, value = nets.apply(ac, p, obs)
    assert logits.shape == (7, 3) and value.shape == (7,)
    torch.testing.assert_close(nets.apply(ac.critic, nets.subparams(p, "critic"), obs).squeeze(-1), value)
    continuous = nets.ActorCritic(4, 2, continuous=True, log_std_init=-1.0)
    (loc, scale), value = nets.apply(continuous, nets.init(continuous, KEY), obs)
    assert loc.shape == scale.shape == (7, 2) and value.shape == (7,)
    torch.testing.assert_close(scale, torch.full((7, 2), math.exp(-1.0)))
    sd = nets.GaussianActor(4, 2, state_dependent_std=True, log_std_min=-3.0, log_std_max=1.0)
    ps = nets.init(sd, KEY, overrides={sd.output_layer: inits.normal(100.0)})  # saturate the squash
    loc, scale = nets.apply(sd, ps, obs)
    assert loc.shape == scale.shape == (7, 2)
    assert scale.log().min() >= -3.0 - 1e-5 and scale.log().max() <= 1.0 + 1e-5
    assert scale.log().min() < -2.9 and scale.log().max() > 0.9
    q = nets.ContinuousQ(4, 2)
    assert nets.apply(q, nets.init(q, KEY), obs, torch.randn(7, 2)).shape == (7,)
    for net, head in [(q, "mlp.4"), (nets.QNetwork(4, 2), "mlp.4"), (nets.DiscreteActor(4, 2), "mlp.4")]:
        assert net.output_layer == head and isinstance(net.get_submodule(head), nn.Linear)
    assert nets.NatureCNN().output_layer == "dense" and nets.NatureCNN(out_features=3).output_layer == "head"


def test_nature_cnn_architecture_and_input_scaling():
    cnn = nets.NatureCNN(4, 84, 84)
    convs = [m for m in cnn.conv if isinstance(m, nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size, c.stride) for c in convs] == [
        (32, (8, 8), (4, 4)),
        (64, (4, 4), (2, 2)),
        (64, (3, 3), (1, 1)),
    ]
    assert (cnn.dense.in_features, cnn.dense.out_features) == (64 * 7 * 7, 512)
    params = nets.init(cnn, KEY)
    frames = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    features = nets.apply(cnn, params, frames)
    assert features.shape == (3, 512) and features.dtype == torch.float32 and (features >= 0).all()
    unscaled = nets.NatureCNN(4, 84, 84, scale_input=False)
    torch.testing.assert_close(nets.apply(unscaled, params, frames.float() / 255.0), features)
    torch.testing.assert_close(nets.apply(cnn, params, frames[0]), features[0])  # unbatched [C, H, W]
    with pytest.raises(ValueError, match=r"x: expected shape \[\.\.\., 4, 84, 84\], got \[3, 84, 84\]"):
        nets.apply(cnn, params, frames[:, 0])
    with pytest.raises(ValueError, match="too small for the Nature CNN"):
        nets.NatureCNN(4, 30, 30)


def test_module_constructor_errors():
    with pytest.raises(ValueError, match="activation: expected one of"):
        nets.MLP(2, [3], 1, activation="swishy")
    with pytest.raises(TypeError, match="hidden_sizes: expected a sequence of positive ints"):
        nets.MLP(2, 3, 1)
    with pytest.raises(ValueError, match=r"hidden_sizes\[1\]: expected a positive int, got 0"):
        nets.MLP(2, [3, 0], 1)
    with pytest.raises(ValueError, match="in_features: expected a positive int"):
        nets.MLP(0, [3], 1)
    with pytest.raises(TypeError, match="output_activation: expected a callable returning an nn.Module"):
        nets.MLP(2, [3], 1, output_activation=lambda: torch.tanh)
    with pytest.raises(ValueError, match="log_std_max"):
        nets.GaussianActor(2, 1, state_dependent_std=True, log_std_min=1.0, log_std_max=0.0)
    q = nets.ContinuousQ(3, 2)
    p = nets.init(q, KEY)
    with pytest.raises(ValueError, match=r"obs, action: expected last dims \(3, 2\)"):
        nets.apply(q, p, torch.randn(4, 3), torch.randn(4, 3))
    with pytest.raises(ValueError, match="obs, action: expected the same batch shape"):
        nets.apply(q, p, torch.randn(4, 3), torch.randn(5, 2))


class _SmallConvNet(nn.Module):
    """An ordinary user module, built normally (real weights), with a BatchNorm (buffers)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 5 * 5, 2)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).flatten(-3))


def test_user_module_with_buffers_eval_mode():
    user = _SmallConvNet().eval()
    params = nets.init(user, KEY)
    buffers = nets.init_buffers(user)
    assert set(buffers) == {"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"}
    buffers["bn.running_mean"] = torch.linspace(-1, 1, 4)  # as if trained
    buffers["bn.running_var"] = torch.linspace(0.5, 2, 4)
    x = torch.randn(6, 3, 5, 5)
    reference = _SmallConvNet().eval()
    reference.load_state_dict({**params, **buffers})
    with torch.no_grad():
        torch.testing.assert_close(nets.apply(user, {**params, **buffers}, x), reference(x))
    # A meta skeleton of the same module: BatchNorm buffers get reset_running_stats values.
    skeleton = nets.skeleton(user)
    meta_buffers = nets.init_buffers(skeleton)
    assert torch.equal(meta_buffers["bn.running_var"], torch.ones(4))
    assert torch.equal(meta_buffers["bn.running_mean"], torch.zeros(4))
    assert meta_buffers["bn.num_batches_tracked"].dtype == torch.int64
    # Eval mode reads the buffers and writes nothing: a pure function, so it vmaps over an ensemble.
    ensemble = nets.init_ensemble(skeleton, KEY, 3)
    out = torch.func.vmap(lambda p: nets.apply(skeleton, {**p, **meta_buffers}, x))(ensemble)
    loop = [nets.apply(skeleton, {**p, **meta_buffers}, x) for p in tree.unstack(ensemble)]
    torch.testing.assert_close(out, torch.stack(loop))


def test_batchnorm_train_mode_updates_the_given_buffers_in_place():
    """functional_call semantics, documented in funrl.nets.core: the passed buffer tensors are updated."""
    skeleton = nets.skeleton(_SmallConvNet)  # train mode
    params, buffers = nets.init(skeleton, KEY), nets.init_buffers(skeleton)
    reference = _SmallConvNet()
    reference.load_state_dict({**params, **buffers})
    x = torch.randn(6, 3, 5, 5)
    fresh = tree.map(torch.clone, buffers)
    with torch.no_grad():
        torch.testing.assert_close(nets.apply(skeleton, {**params, **fresh}, x), reference(x))
    torch.testing.assert_close(fresh["bn.running_mean"], reference.bn.running_mean)
    torch.testing.assert_close(fresh["bn.running_var"], reference.bn.running_var)
    assert fresh["bn.num_batches_tracked"].item() == 1
    assert torch.equal(buffers["bn.running_var"], torch.ones(4))  # the clones took the update


def test_buffers_errors():
    skeleton = nets.skeleton(_SmallConvNet)
    params = nets.init(skeleton, KEY)
    with pytest.raises(
        ValueError, match=r"buffers \['bn.running_mean', 'bn.running_var', 'bn.num_batches_tracked'\]"
    ):
        nets.apply(skeleton, params, torch.randn(1, 3, 5, 5))

    class WithMask(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("mask", torch.tril(torch.ones(3, 3)))

    with pytest.raises(ValueError, match="buffer 'mask' lives on the meta device"):
        nets.init_buffers(nets.skeleton(WithMask))
    assert torch.equal(nets.init_buffers(WithMask())["mask"], torch.tril(torch.ones(3, 3)))


def test_apply_errors_name_the_problem():
    mlp = nets.MLP(3, [4], 2)
    params = nets.init(mlp, KEY)
    x = torch.randn(2, 3)
    with pytest.raises(TypeError, match="module: expected a torch.nn.Module, got dict"):
        nets.apply(params, mlp, x)
    with pytest.raises(TypeError, match="params: expected a dict"):
        nets.apply(mlp, list(params.values()), x)
    missing = {k: v for k, v in params.items() if k != "2.bias"}
    with pytest.raises(ValueError, match=r"params: missing parameters \['2.bias'\] of MLP"):
        nets.apply(mlp, missing, x)
    with pytest.raises(ValueError, match=r"params: unexpected names \['3.weight'\]"):
        nets.apply(mlp, {**params, "3.weight": torch.zeros(2, 2)}, x)
    with pytest.raises(ValueError, match=r"params\['0.weight'\]: expected shape \[4, 3\], got \[3, 4\]"):
        nets.apply(mlp, {**params, "0.weight": params["0.weight"].T}, x)
    stacked = tree.stack([params, params])
    with pytest.raises(ValueError, match="for an ensemble, vmap apply"):
        nets.apply(mlp, stacked, x)
    with pytest.raises(TypeError, match=r"params\['2.bias'\]: expected a Tensor, got list"):
        nets.apply(mlp, {**params, "2.bias": [0.0, 0.0]}, x)


class _TiedAutoencoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(6, 3, bias=False)
        self.decoder = nn.Linear(3, 6, bias=False)
        self.decoder.weight = self.encoder.weight  # shape [3, 6] used transposed below

    def forward(self, x):
        return torch.nn.functional.linear(self.encoder(x), self.decoder.weight.T)


def test_tied_parameters_appear_once_and_stay_tied():
    skeleton = nets.skeleton(_TiedAutoencoder)
    params = nets.init(skeleton, KEY, inits.orthogonal())
    assert list(params) == ["encoder.weight"]
    x = torch.randn(4, 6)
    w = params["encoder.weight"]
    torch.testing.assert_close(nets.apply(skeleton, params, x), x @ w.T @ w)
    grads = torch.func.grad(lambda p: nets.apply(skeleton, p, x).square().sum())(params)
    assert list(grads) == ["encoder.weight"]


class _SharedLayer(nn.Module):
    """One Linear registered under two names (weight sharing by module reuse)."""

    def __init__(self):
        super().__init__()
        self.first = nn.Linear(3, 3)
        self.second = self.first

    def forward(self, x):
        return self.second(torch.tanh(self.first(x)))


def test_shared_submodule_is_one_set_of_params():
    skeleton = nets.skeleton(_SharedLayer)
    params = nets.init(skeleton, KEY)
    assert list(params) == ["first.weight", "first.bias"]
    x = torch.randn(5, 3)
    w, b = params["first.weight"], params["first.bias"]
    torch.testing.assert_close(nets.apply(skeleton, params, x), torch.tanh(x @ w.T + b) @ w.T + b)
    ensemble = nets.init_ensemble(skeleton, KEY, 2)
    out = torch.func.vmap(nets.apply, in_dims=(None, 0, None))(skeleton, ensemble, x)
    loop = torch.stack([nets.apply(skeleton, p, x) for p in tree.unstack(ensemble)])
    torch.testing.assert_close(out, loop)


def test_subparams_errors():
    with pytest.raises(ValueError, match="prefix: no entry of params lies under 'actor'"):
        nets.subparams({"critic.0.weight": torch.zeros(1)}, "actor")
    with pytest.raises(ValueError, match="prefix: expected a non-empty module path"):
        nets.subparams({}, "")


def test_skeleton_errors():
    with pytest.raises(TypeError, match="module_or_cls: expected an nn.Module class"):
        nets.skeleton(3)
    with pytest.raises(TypeError, match="module: expected a torch.nn.Module"):
        nets.skeleton(lambda: "not a module")
    with pytest.raises(TypeError, match="extra arguments"):
        nets.skeleton(nn.Linear(2, 2), 3)


# ---------------------------------------------------------------------------------------------
# Transforms: grad, vmap (ensembles and keys), compile
# ---------------------------------------------------------------------------------------------


def test_grad_through_apply_matches_autograd():
    ac = nets.ActorCritic(4, 3)
    params = nets.init(ac, KEY, inits.orthogonal(math.sqrt(2)))
    obs, target = torch.randn(8, 4), torch.randn(8)

    def loss_fn(p):
        logits, value = nets.apply(ac, p, obs)
        return (value - target).square().mean() + torch.logsumexp(logits, -1).mean()

    grads = torch.func.grad(loss_fn)(params)
    module = _copy_into(nets.ActorCritic(4, 3, device="cpu"), params)
    logits, value = module(obs)
    ((value - target).square().mean() + torch.logsumexp(logits, -1).mean()).backward()
    for name, p in module.named_parameters():
        torch.testing.assert_close(grads[name], p.grad, msg=name)


@given(n=st.integers(1, 5), seed=st.integers(0, 2**40))
def test_init_ensemble_and_vmap_over_keys_equal_a_loop(n, seed):
    net = nets.ActorCritic(3, 2, hidden_sizes=(8,), continuous=True)
    key = random.key(seed)
    rule, overrides = inits.orthogonal(math.sqrt(2)), net.ppo_overrides()
    ensemble = nets.init_ensemble(net, key, n, rule, overrides)
    loop = [nets.init(net, k, rule, overrides) for k in random.split(key, n)]
    assert tree.tree_allclose(ensemble, tree.stack(loop), rtol=1e-5, atol=1e-6)
    assert tree.tree_equal(nets.init_ensemble(net, key, n, rule, overrides, use_vmap=False), tree.stack(loop))
    for leaf in tree.leaves(ensemble):
        assert leaf.shape[0] == n and leaf.is_contiguous() and 0 not in leaf.stride()


def test_ensemble_apply_via_vmap_equals_loop():
    q = nets.ContinuousQ(4, 2, hidden_sizes=(16, 16))
    ensemble = nets.init_ensemble(q, KEY, 5)
    obs, act = torch.randn(7, 4), torch.randn(7, 2)
    values = torch.func.vmap(nets.apply, in_dims=(None, 0, None, None))(q, ensemble, obs, act)
    loop = torch.stack([nets.apply(q, p, obs, act) for p in tree.unstack(ensemble)])
    assert values.shape == (5, 7)
    torch.testing.assert_close(values, loop)
    # Members differ: an ensemble of independent draws, not copies.
    assert not torch.allclose(values[0], values[1])


def test_init_ensemble_errors():
    with pytest.raises(ValueError, match="n: expected a positive int, got 0"):
        nets.init_ensemble(nets.MLP(2, [2], 1), KEY, 0)
    with pytest.raises(ValueError, match="overrides: 'head' matches no parameter"):
        nets.init_ensemble(nets.MLP(2, [2], 1), KEY, 2, overrides={"head": inits.zeros})


@pytest.mark.slow
def test_compiled_apply_equals_eager():
    mlp = nets.MLP(4, [16, 16], 3, layer_norm=True)
    ensemble = nets.init_ensemble(mlp, KEY, 3, inits.orthogonal(math.sqrt(2)))
    x = torch.randn(5, 4)

    def ensemble_forward(params, obs):
        return torch.func.vmap(nets.apply, in_dims=(None, 0, None))(mlp, params, obs)

    compiled = torch.compile(ensemble_forward, fullgraph=True)
    torch.testing.assert_close(compiled(ensemble, x), ensemble_forward(ensemble, x), rtol=1e-5, atol=1e-6)
    x2 = torch.randn(5, 4)  # same shapes: no recompile, still equal
    torch.testing.assert_close(compiled(ensemble, x2), ensemble_forward(ensemble, x2), rtol=1e-5, atol=1e-6)


def test_apply_reads_the_module_spec_once_and_compiled_apply_reuses_it(monkeypatch):
    """``init`` reads the module's parameter spec and keeps it on the module (a plain attribute, not
    a parameter, buffer or submodule), so a compiled ``apply`` does not walk the module tree again;
    ``skeleton`` copies do not inherit it."""
    from funrl.nets import core

    ac = nets.ActorCritic(4, 2)
    params = nets.init(ac, random.key(0))
    spec = getattr(ac, core._SPEC_ATTR)
    assert spec == core._read_spec(ac)
    assert core._SPEC_ATTR not in dict(ac.named_modules()) and core._SPEC_ATTR not in ac.state_dict()
    obs = random.normal(random.key(1), (3, 4))
    expected = nets.apply(ac, params, obs)

    def walk_again(module):
        raise AssertionError("the spec was read again")

    monkeypatch.setattr(core, "_read_spec", walk_again)
    torch.compiler.reset()
    got = torch.compile(lambda p, x: nets.apply(ac, p, x), backend="eager", fullgraph=True)(params, obs)
    assert tree.tree_equal(got, expected)
    monkeypatch.undo()

    # A skeleton of a module with real buffers: its own spec says they are on meta.
    real = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
    nets.apply(real, nets.init(real, random.key(2)), torch.ones(2, 3))
    meta = nets.skeleton(real)
    assert not hasattr(meta, core._SPEC_ATTR)
    with pytest.raises(ValueError, match="live on the meta device"):
        nets.apply(meta, nets.init(meta, random.key(2)), torch.ones(2, 3))


def test_apply_follows_the_module_mode():
    """Dropout reads the training flag: apply follows train()/eval() after the first call."""
    dropped = nn.Sequential(nn.Linear(3, 3), nn.Dropout(p=1.0))
    params = nets.init(dropped, random.key(2))
    dropped.eval()
    assert nets.apply(dropped, params, torch.ones(2, 3)).abs().sum() > 0
    dropped.train()
    assert nets.apply(dropped, params, torch.ones(2, 3)).abs().sum() == 0


def test_continuous_q_checks_its_inputs():
    q = nets.ContinuousQ(4, 2, hidden_sizes=(8,))
    params = nets.init(q, random.key(0))
    with pytest.raises(ValueError, match=r"^obs, action: expected last dims \(4, 2\), got \[5, 3\]"):
        nets.apply(q, params, torch.zeros(5, 3), torch.zeros(5, 2))
    with pytest.raises(ValueError, match=r"^obs, action: expected the same batch shape, got \[5\] and \[4\]"):
        nets.apply(q, params, torch.zeros(5, 4), torch.zeros(4, 2))


def test_an_applied_module_still_pickles_and_copies(tmp_path):
    import copy
    import pickle

    ac = nets.ActorCritic(4, 2)
    params = nets.init(ac, random.key(0))
    obs = torch.ones(3, 4)
    expected = nets.apply(ac, params, obs)
    for again in (pickle.loads(pickle.dumps(ac)), copy.deepcopy(ac)):
        assert tree.tree_equal(nets.apply(again, params, obs), expected)
    torch.save(ac, tmp_path / "ac.pt")
    loaded = torch.load(tmp_path / "ac.pt", weights_only=False)
    assert tree.tree_equal(nets.apply(loaded, params, obs), expected)


def test_apply_runs_module_hooks():
    """apply is a module call (functional_call): the module's own and global hooks run."""
    ac = nets.ActorCritic(4, 2)
    params = nets.init(ac, random.key(0))
    obs = torch.ones(3, 4)
    seen = []
    handle = ac.critic[2].register_forward_hook(lambda m, args, out: seen.append(out.shape))
    value = nets.apply(ac, params, obs)[1]
    assert seen == [torch.Size([3, 64])]
    handle.remove()
    doubled = torch.nn.modules.module.register_module_forward_hook(
        lambda m, args, out: 2 * out if isinstance(m, nn.Tanh) else None
    )
    try:
        assert not torch.equal(nets.apply(ac, params, obs)[1], value)
    finally:
        doubled.remove()
    assert torch.equal(nets.apply(ac, params, obs)[1], value)
