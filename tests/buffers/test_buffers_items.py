"""Items of any pytree structure: nested items, every dtype, structure checks, copies, pickling."""

import copy
import pickle
from typing import NamedTuple

import optree
import pytest
import torch
from buffer_checks import compiled_add_and_sample_equal_eager
from hypothesis import given
from hypothesis import strategies as st

import funrl.buffers as fb
from funrl import random as frandom
from funrl import tree
from funrl.control import compile as funrl_compile


class Step(NamedTuple):
    obs: torch.Tensor
    extra: tuple
    note: None


STEP = Step(
    obs=torch.zeros(2, 3),
    extra=(torch.zeros((), dtype=torch.int64), {"flag": torch.zeros((), dtype=torch.bool)}),
    note=None,
)


def step_batch(start, size):
    ids = torch.arange(start, start + size)
    obs = (ids[:, None, None] * 10 + torch.arange(6).view(1, 2, 3)).float()
    return Step(obs=obs, extra=(ids, {"flag": ids % 3 == 0}), note=None)


DTYPES = [torch.float32, torch.float64, torch.float16, torch.int64, torch.int32, torch.uint8, torch.bool]
shapes = st.lists(st.integers(0, 3), max_size=3).map(tuple)
leaf_specs = st.tuples(st.sampled_from(DTYPES), shapes)
items_of_specs = st.recursive(
    leaf_specs,
    lambda inner: st.one_of(
        st.dictionaries(st.sampled_from("abcde"), inner, min_size=1, max_size=3),
        st.lists(inner, min_size=1, max_size=3).map(tuple),
    ),
    max_leaves=6,
)


def is_spec(x):
    return isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], torch.dtype)


@given(
    spec=items_of_specs, sizes=st.lists(st.integers(1, 7), min_size=1, max_size=3), seed=st.integers(0, 99)
)
def test_any_item_structure_comes_back_as_added(spec, sizes, seed):
    gen = torch.Generator().manual_seed(seed)

    def make(s, size):
        dtype, shape = s
        high = 2 if dtype is torch.bool else 100
        return torch.randint(0, high, (*size, *shape), generator=gen).to(dtype)

    capacity = 5
    buf = fb.flat(capacity)
    state = buf.init(optree.tree_map(lambda s: make(s, ()), spec, is_leaf=is_spec))
    added = []
    for size in sizes:
        batch = optree.tree_map(lambda s, n=size: make(s, (n,)), spec, is_leaf=is_spec)
        state = buf.add(state, batch)
        added.append(batch)
    everything = tree.concatenate(added)
    kept = tree.map(lambda x: x[-capacity:], everything)
    assert tree.tree_equal(fb.items_in_order(state), kept)
    sample = buf.sample(state, frandom.key(seed), 4)
    assert tree.tree_equal(sample.items, tree.map(lambda x: x[sample.indices], state.experience))


def test_example_leaves_on_two_devices_are_refused():
    with pytest.raises(
        ValueError, match=r"example_item: leaf item\['b'\] is on meta but leaf item\['a'\] on cpu"
    ):
        fb.flat(4).init({"a": torch.zeros(2), "b": torch.zeros(2, device="meta")})


def test_a_batch_of_another_structure_names_the_leaves():
    buf = fb.flat(6)
    state = buf.init(STEP)
    wrong = step_batch(0, 2)._replace(extra=(torch.arange(2),))
    with pytest.raises(ValueError, match=r"missing leaves: \[\"item\[1\]\[1\]\['flag'\]\"\]"):
        buf.add(state, wrong)
    with pytest.raises(TypeError, match=r"leaf item\[1\]\[0\] expected dtype torch.int64"):
        buf.add(
            state,
            step_batch(0, 2)._replace(extra=(torch.arange(2.0), {"flag": torch.ones(2, dtype=torch.bool)})),
        )


@pytest.mark.slow
def test_compiled_add_and_sample_of_a_nested_item_equal_eager():
    # a NamedTuple item with a tuple, a dict, a bool leaf and None
    buf = fb.flat(5)
    added = [(step_batch(start, 3), frandom.key(start)) for start in (0, 3, 6)]
    mine, mine_sample = compiled_add_and_sample_equal_eager(buf, buf.init(STEP), added, 4)
    assert type(mine_sample.items) is Step and mine_sample.items.note is None
    assert tree.tree_equal(mine_sample.items, tree.map(lambda x: x[mine_sample.indices], mine.experience))
    # the structure check holds while tracing too: a renamed leaf is refused
    renamed = step_batch(0, 3)._replace(extra=(torch.arange(3), {"flog": torch.ones(3, dtype=torch.bool)}))
    with pytest.raises(Exception, match=r"missing leaves: .*flag.*unexpected leaves: .*flog"):
        funrl_compile(buf.add)(mine, renamed)


def test_a_state_pickles_and_copies(tmp_path):
    buf = fb.flat(4)
    state = buf.add(buf.init(STEP), step_batch(0, 3))
    for again in (pickle.loads(pickle.dumps(state)), copy.deepcopy(state)):
        assert type(again.experience) is Step
        assert tree.tree_equal(again, state)
    torch.save(state, tmp_path / "state.pt")  # torch.save pickles too (loading needs weights_only=False)
    assert tree.tree_equal(torch.load(tmp_path / "state.pt", weights_only=False), state)
