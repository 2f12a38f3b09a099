"""Tests for funrl.tree: leading-dimension helpers, equality, sizes, casting, and pytree registries."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import optree
import pytest
import torch
import torch.utils._pytree as torch_pytree
from hypothesis import given
from hypothesis import strategies as st
from tensordict import TensorDict
from torch.func import vmap

import funrl.random as R
from funrl import tree


class Inner(NamedTuple):
    position: torch.Tensor
    count: torch.Tensor


class State(NamedTuple):
    obs: torch.Tensor
    inner: Inner
    params: dict[str, torch.Tensor]


def make_state(seed: int, batch: tuple[int, ...] = ()) -> State:
    k1, k2, k3 = R.split(R.key(seed), 3)
    return State(
        obs=R.normal(k1, (*batch, 4)),
        inner=Inner(position=R.uniform(k2, (*batch, 2), torch.float64), count=R.randint(k3, batch, 0, 9)),
        params={"w": R.normal(k3, (*batch, 3, 2)), "b": torch.zeros(*batch, 2)},
    )


# ---------------------------------------------------------------------------------------------
# stack / unstack / index / concatenate
# ---------------------------------------------------------------------------------------------


@given(n=st.integers(1, 6), seed=st.integers(0, 2**31 - 1))
def test_stack_unstack_round_trip(n, seed):
    trees = [make_state(seed + i) for i in range(n)]
    stacked = tree.stack(trees)
    assert isinstance(stacked, State) and isinstance(stacked.inner, Inner)
    assert stacked.obs.shape == (n, 4) and stacked.params["w"].shape == (n, 3, 2)
    assert stacked.inner.count.dtype == torch.int64
    back = tree.unstack(stacked)
    assert len(back) == n
    for original, recovered in zip(trees, back, strict=True):
        assert tree.tree_equal(original, recovered)
    # And the other way round: stack(unstack(x)) == x.
    assert tree.tree_equal(tree.stack(back), stacked)


def test_stack_along_another_dim():
    trees = [{"a": torch.full((2, 3), float(i))} for i in range(4)]
    stacked = tree.stack(trees, dim=1)
    assert stacked["a"].shape == (2, 4, 3)
    assert tree.tree_equal(tree.unstack(stacked, dim=1), trees)


def test_stacked_params_vmap_equals_loop():
    # An ensemble: stacked trees under vmap give what each member gives alone.
    members = [make_state(i).params for i in range(3)]
    x = torch.ones(3)

    def forward(p: dict[str, torch.Tensor]) -> torch.Tensor:
        return x @ p["w"] + p["b"]

    batched = vmap(forward)(tree.stack(members))
    assert torch.equal(batched, torch.stack([forward(p) for p in members]))


def test_index_slices_every_leaf():
    stacked = make_state(0, batch=(5,))
    one = tree.index(stacked, 2)
    assert tree.tree_equal(one, tree.unstack(stacked)[2])
    part = tree.index(stacked, slice(1, 4))
    assert part.obs.shape == (3, 4) and torch.equal(part.inner.count, stacked.inner.count[1:4])
    chosen = tree.index(stacked, torch.tensor([4, 0]))
    assert torch.equal(chosen.params["w"], stacked.params["w"][[4, 0]])


def test_concatenate_then_index_recovers_parts():
    a, b = make_state(0, batch=(2,)), make_state(1, batch=(3,))
    both = tree.concatenate([a, b])
    assert both.obs.shape == (5, 4)
    assert tree.tree_equal(tree.index(both, slice(0, 2)), a)
    assert tree.tree_equal(tree.index(both, slice(2, 5)), b)


def test_stack_rejects_mismatched_structures_naming_the_argument():
    a = {"x": torch.zeros(2)}
    b = {"y": torch.zeros(2)}
    with pytest.raises(ValueError, match=r"^trees\[1\]: expected tree structure"):
        tree.stack([a, b])
    with pytest.raises(ValueError, match=r"^trees\[2\]:"):
        tree.concatenate([a, a, b])
    with pytest.raises(ValueError, match=r"^trees: expected a non-empty sequence"):
        tree.stack([])
    with pytest.raises(ValueError, match=r"^trees: expected a non-empty sequence"):
        tree.stack(torch.zeros(3))
    with pytest.raises(TypeError, match=r"^trees\[0\]: expected tensor leaves, got float"):
        tree.stack([{"x": 1.0}, {"x": 2.0}])


def test_unstack_rejects_leaves_of_different_leading_sizes():
    with pytest.raises(ValueError, match=r"^tree: expected every leaf to share dimension 0"):
        tree.unstack({"a": torch.zeros(2, 3), "b": torch.zeros(3)})
    with pytest.raises(ValueError, match=r"^tree: expected at least one tensor leaf"):
        tree.unstack({})


# ---------------------------------------------------------------------------------------------
# map / map_with_path
# ---------------------------------------------------------------------------------------------


def test_map_over_several_trees():
    a, b = make_state(0), make_state(1)
    total = tree.map(lambda x, y: x + y, a, b)
    assert isinstance(total, State)
    assert torch.equal(total.params["w"], a.params["w"] + b.params["w"])
    assert torch.equal(total.inner.count, a.inner.count + b.inner.count)


def test_map_mismatched_structures_raises_naming_the_argument():
    a = make_state(0)
    wrong = a._replace(params={"w": a.params["w"]})  # "b" missing
    with pytest.raises(ValueError, match=r"^rest\[0\]: expected tree structure"):
        tree.map(lambda x, y: x + y, a, wrong)
    with pytest.raises(ValueError, match=r"^rest\[1\]: expected tree structure"):
        tree.map_with_path(lambda p, x, y, z: x, a, a, wrong)
    # A tuple in place of the NamedTuple is a different structure too.
    with pytest.raises(ValueError, match=r"^rest\[0\]:"):
        tree.map(lambda x, y: x, a, tuple(a))


def test_map_with_path_sees_field_and_key_names():
    seen = {}
    tree.map_with_path(lambda path, x: seen.setdefault(path, x.shape), make_state(0))
    assert seen == {
        (0,): (4,),
        (1, 0): (2,),
        (1, 1): (),
        (2, "b"): (2,),
        (2, "w"): (3, 2),
    }


def test_leaves_structure_flatten_unflatten():
    s = make_state(3)
    flat, spec = tree.flatten(s)
    assert all(x is y for x, y in zip(flat, tree.leaves(s), strict=True)) and len(flat) == 5
    assert spec == tree.structure(s)
    assert tree.tree_equal(tree.unflatten(spec, flat), s)
    assert tree.num_elements(s) == 4 + 2 + 1 + 6 + 2


# ---------------------------------------------------------------------------------------------
# Equality (each planted difference must be detected)
# ---------------------------------------------------------------------------------------------


def test_tree_equal_detects_planted_differences():
    s = make_state(0)
    assert tree.tree_equal(s, make_state(0))
    bumped = s._replace(obs=s.obs.clone())
    bumped.obs[2] = torch.nextafter(bumped.obs[2], torch.tensor(float("inf")))  # one ulp
    assert not tree.tree_equal(s, bumped)
    assert not tree.tree_equal(s, s._replace(inner=s.inner._replace(count=s.inner.count + 1)))
    assert not tree.tree_equal(s, s._replace(obs=s.obs.double()))  # dtype
    assert not tree.tree_equal(s, s._replace(obs=s.obs[None]))  # shape
    assert not tree.tree_equal(s, s._replace(params={"w": s.params["w"]}))  # structure
    assert not tree.tree_equal({"a": 1}, {"a": 2})  # non-tensor leaves compared too


def test_tree_equal_treats_nan_as_equal_to_nan():
    a = {"x": torch.tensor([1.0, float("nan")])}
    assert tree.tree_equal(a, {"x": torch.tensor([1.0, float("nan")])})
    assert not tree.tree_equal(a, {"x": torch.tensor([float("nan"), 1.0])})


def test_tree_allclose_tolerances():
    s = make_state(1)
    near = tree.map(lambda x: x * (1 + 1e-7) if x.dtype.is_floating_point else x, s)
    assert tree.tree_allclose(s, near)
    far = s._replace(obs=s.obs + 1e-3)
    assert not tree.tree_allclose(s, far)
    assert tree.tree_allclose(s, far, atol=1e-2)
    assert not tree.tree_allclose(s, s._replace(obs=s.obs[:2]))  # shape
    assert not tree.tree_allclose(s, s._replace(inner=(s.inner.position, s.inner.count)))  # structure


# ---------------------------------------------------------------------------------------------
# size_bytes / to / zeros_like
# ---------------------------------------------------------------------------------------------


def test_size_bytes_counts_every_tensor_leaf():
    s = make_state(0)
    # obs 4 f32, position 2 f64, count 1 i64, w 6 f32, b 2 f32.
    assert tree.size_bytes(s) == 4 * 4 + 2 * 8 + 1 * 8 + 6 * 4 + 2 * 4
    assert tree.size_bytes({"x": torch.zeros(10, dtype=torch.bfloat16), "n": 3}) == 20


def test_to_dtype_casts_floats_and_keeps_ints():
    s = make_state(0)
    half = tree.to(s, dtype=torch.float16)
    assert half.obs.dtype == torch.float16 and half.inner.position.dtype == torch.float16
    assert half.inner.count.dtype == torch.int64
    assert torch.equal(half.inner.count, s.inner.count)
    keys = {"key": R.key(3), "w": torch.zeros(2)}
    assert tree.to(keys, dtype=torch.float64)["key"].dtype == torch.int64  # keys must survive casts
    moved = tree.to(s, device="cpu")
    assert tree.tree_equal(moved, s)


def test_zeros_like_keeps_structure_shapes_and_dtypes():
    s = make_state(0)
    z = tree.zeros_like(s)
    assert tree.structure(z) == tree.structure(s)
    for a, b in zip(tree.leaves(z), tree.leaves(s), strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype and not a.any()


# ---------------------------------------------------------------------------------------------
# One structure for optree, torch.utils._pytree and tensordict
# ---------------------------------------------------------------------------------------------


def _named_path(obj, index_path: tuple) -> tuple:
    """An optree path (field indices, dict keys) spelled with NamedTuple field names."""
    names = []
    for entry in index_path:
        names.append(obj._fields[entry] if hasattr(obj, "_fields") else entry)
        obj = obj[entry]
    return tuple(names)


def _torch_named_path(path: tuple) -> tuple:
    names = []
    for entry in path:
        if isinstance(entry, torch_pytree.GetAttrKey):
            names.append(entry.name)
        elif isinstance(entry, torch_pytree.MappingKey):
            names.append(entry.key)
        else:
            names.append(entry.idx)
    return tuple(names)


def test_namedtuple_state_is_the_same_tree_for_optree_torch_and_tensordict():
    s = make_state(5)
    # optree (via funrl.tree).
    optree_paths = optree.tree_paths(s, namespace="funrl")
    by_optree = {_named_path(s, p): leaf for p, leaf in zip(optree_paths, tree.leaves(s), strict=True)}
    # torch.utils._pytree: what vmap and torch.compile flatten.
    torch_flat, torch_spec = torch_pytree.tree_flatten_with_path(s)
    by_torch = {_torch_named_path(p): leaf for p, leaf in torch_flat}
    assert tree.tree_equal(torch_pytree.tree_unflatten([x for _, x in torch_flat], torch_spec), s)
    # tensordict: the NamedTuple becomes a nested TensorDict keyed by field names.
    td = TensorDict.from_namedtuple(s)
    by_td = {(k,) if isinstance(k, str) else k: td[k] for k in td.keys(include_nested=True, leaves_only=True)}

    expected = {("obs",), ("inner", "position"), ("inner", "count"), ("params", "w"), ("params", "b")}
    assert by_optree.keys() == by_torch.keys() == by_td.keys() == expected
    for path, leaf in by_optree.items():
        assert by_torch[path] is leaf
        assert torch.equal(by_td[path], leaf) and by_td[path].dtype == leaf.dtype


def test_flat_namedtuple_round_trips_through_tensordict_pytree():
    inner = make_state(2).inner
    td = TensorDict.from_pytree(inner)
    back = td.to_pytree()
    assert type(back) is Inner
    assert tree.tree_equal(back, inner)


def test_vmap_and_compile_trace_see_namedtuple_states():
    # vmap flattens with torch.utils._pytree: a batched NamedTuple comes back as one.
    batched = make_state(0, batch=(4,))

    def step(s: State) -> State:
        return s._replace(obs=s.obs * 2, inner=s.inner._replace(count=s.inner.count + 1))

    out = vmap(step)(batched)
    assert isinstance(out, State) and isinstance(out.inner, Inner)
    assert tree.tree_equal(out, tree.stack([step(s) for s in tree.unstack(batched)]))


@dataclasses.dataclass
class DataclassState:
    weight: torch.Tensor
    steps: torch.Tensor


tree.register_state(DataclassState)


def test_register_state_dataclass_works_under_vmap_and_tree_helpers():
    states = [DataclassState(weight=R.normal(R.key(i), (3,)), steps=torch.tensor(i)) for i in range(4)]
    stacked = tree.stack(states)
    assert isinstance(stacked, DataclassState) and stacked.weight.shape == (4, 3)

    def step(s: DataclassState) -> DataclassState:
        return DataclassState(weight=s.weight.sin(), steps=s.steps + 1)

    out = vmap(step)(stacked)  # needs the torch.utils._pytree registration
    assert isinstance(out, DataclassState)
    for i, s in enumerate(states):
        assert tree.tree_equal(tree.index(out, i), step(s))
    assert optree.tree_paths(stacked, namespace="funrl") == [("weight",), ("steps",)]
    torch_flat, _ = torch_pytree.tree_flatten(stacked)
    assert [x is y for x, y in zip(torch_flat, tree.leaves(stacked), strict=True)] == [True, True]


def test_register_state_rejects_non_dataclasses():
    class Plain:
        pass

    with pytest.raises(TypeError, match=r"^cls: expected a dataclass type"):
        tree.register_state(Plain)
