"""Packed storage: one tensor per dtype, a row per item; the layout, packing, views, persistence."""

import copy
import json
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
from funrl.buffers._storage import ItemLayout, item_example, pack, packed_type, unpack
from funrl.control import compile as funrl_compile

TRANSITION = {
    "obs": torch.zeros(17),
    "action": torch.zeros(6),
    "reward": torch.zeros(()),
    "done": torch.zeros((), dtype=torch.bool),
    "next_obs": torch.zeros(17),
}


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


def test_a_transition_packs_into_one_float_row_with_done_in_its_last_word():
    state = fb.flat(10).init(TRANSITION)
    assert [tuple(g.shape) for g in state.experience] == [(10, 42)]
    assert [g.dtype for g in state.experience] == [torch.float32]
    items = fb.storage_items(state.experience)
    assert {k: tuple(v.shape) for k, v in items.items()} == {k: (10, *v.shape) for k, v in TRANSITION.items()}
    # the items are views of the packed rows (done: of the row's 165th byte): an add shows through them
    batch = {
        k: (torch.ones(3, *v.shape) * (i + 1)).to(v.dtype) for i, (k, v) in enumerate(TRANSITION.items())
    }
    state = fb.flat(10).add(state, batch)
    assert items["done"].data_ptr() == state.experience.group0.data_ptr() + 41 * 4
    assert tree.tree_equal(tree.map(lambda x: x[:3], items), batch)
    assert tree.tree_equal(
        tree.map(lambda x: x[3:], items),
        tree.map(lambda x: torch.zeros(7, *x.shape, dtype=x.dtype), TRANSITION),
    )


def flag_words(state):
    """The 42nd float of each stored transition, as the int32 its bits make."""
    return state.experience.group0[:, 41].view(torch.int32)


def test_every_add_path_writes_done_as_the_low_byte_of_a_zeroed_word():
    # the traced sample reads done as `word != 0`, the eager one as the word's first byte: both
    # hold only if the word's other bytes stay zero, whichever path wrote it
    buf = fb.flat(6)
    done = torch.tensor([True, False, True, True])
    batch = {k: torch.zeros(4, *v.shape, dtype=v.dtype) for k, v in TRANSITION.items()} | {"done": done}
    expected = torch.tensor([1, 0, 1, 1, 0, 0], dtype=torch.int32)
    native = buf.add(buf.init(TRANSITION), batch)  # the C++ ring writer
    assert torch.equal(flag_words(native), expected)
    strided = {**batch, "obs": torch.zeros(17, 4).t()}  # not contiguous: torch's pack_into
    assert torch.equal(flag_words(buf.add(buf.init(TRANSITION), strided)), expected)
    wrapped = buf.add(buf.init(TRANSITION), {k: torch.cat([v, v]) for k, v in strided.items()})
    # the last 6 of 8 items, from row 2 on, wrapping: rows 2-5 get items 2-5, rows 0-1 items 6-7
    assert torch.equal(flag_words(wrapped), torch.tensor([1, 1, 1, 1, 1, 0], dtype=torch.int32))
    traced = torch.func.vmap(buf.add)(tree.stack([buf.init(TRANSITION)]), tree.map(lambda x: x[None], batch))
    assert torch.equal(traced.experience.group0[0, :, 41].view(torch.int32), expected)


def test_bool_leaves_are_hosted_by_the_largest_word_group_or_kept_apart():
    def dtypes(item):
        return ItemLayout.of(item).dtypes

    flag = torch.zeros((), dtype=torch.bool)
    mask = torch.zeros(5, dtype=torch.bool)
    # the host: the 4- or 8-byte dtype with the most bytes per item (first on a tie)
    item = {"a": torch.zeros(2, dtype=torch.int64), "b": torch.zeros(3), "f": flag}
    assert dtypes(item) == (torch.int64, torch.float32)
    assert ItemLayout.of(item).host == 0 and ItemLayout.of(item).widths == (3, 3)
    item = {"a": torch.zeros(1, dtype=torch.int64), "b": torch.zeros(3), "f": flag, "m": mask}
    layout = ItemLayout.of(item)
    assert layout.host == 1 and layout.widths == (1, 5)  # 3 floats, then 6 bytes in 2 words
    assert layout.offsets == (0, 0, 12, 13)
    # no 4- or 8-byte real dtype: a bool group as before
    assert dtypes({"a": torch.zeros(2, dtype=torch.float16), "f": flag}) == (torch.float16, torch.bool)
    assert dtypes({"a": torch.zeros(2, dtype=torch.complex64), "f": flag}) == (torch.complex64, torch.bool)
    assert dtypes({"f": flag, "m": mask}) == (torch.bool,)
    assert ItemLayout.of({"f": flag}).host is None


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
    spec=items_of_specs,
    batch=st.lists(st.integers(1, 3), min_size=1, max_size=2).map(tuple),
    seed=st.integers(0, 99),
)
def test_pack_then_unpack_is_the_identity(spec, batch, seed):
    gen = torch.Generator().manual_seed(seed)

    def make(s, dims):
        dtype, shape = s
        return (torch.randint(0, 2 if dtype is torch.bool else 100, (*dims, *shape), generator=gen)).to(dtype)

    example = optree.tree_map(lambda s: make(s, ()), spec, is_leaf=is_spec)
    values = optree.tree_map(lambda s: make(s, batch), spec, is_leaf=is_spec)
    layout = ItemLayout.of(example)
    leaves = optree.tree_leaves(values, namespace="funrl")
    groups = pack(layout, leaves, batch)
    dtypes = [x.dtype for x in leaves]
    word_sized = [d for d in dtypes if d.itemsize in (4, 8)]
    stored = [d for d in dtypes if not (word_sized and d is torch.bool)]
    assert [g.dtype for g in groups] == list(layout.dtypes) == list(dict.fromkeys(stored))
    assert [g.shape for g in groups] == [torch.Size((*batch, w)) for w in layout.widths]
    assert tree.tree_equal(unpack(layout, groups), values)
    assert ItemLayout.of(item_example(layout)) == layout
    # under vmap bool leaves are shifted out of (and into) the host's words: the same items
    flat_groups = [g.flatten(0, -2) for g in groups]
    traced = torch.func.vmap(lambda *gs: unpack(layout, gs))(*flat_groups)
    assert tree.tree_equal(tree.map(lambda x: x.unflatten(0, batch), traced), values)
    flat_leaves = [x.flatten(0, len(batch) - 1) for x in leaves]
    traced_groups = torch.func.vmap(lambda *xs: tuple(pack(layout, list(xs), ())))(*flat_leaves)
    assert all(torch.equal(a.flatten(0, -2), b) for a, b in zip(flat_groups, traced_groups, strict=True))


def test_equal_layouts_share_one_packed_type_and_states_stack():
    buf = fb.flat(4)
    a, b = buf.init(TRANSITION), buf.init(tree.map(torch.ones_like, TRANSITION))
    assert type(a.experience) is type(b.experience)
    assert tree.structure(a) == tree.structure(b)
    other = dict(TRANSITION, done=torch.zeros((), dtype=torch.uint8))
    assert packed_type(ItemLayout.of(other)) is not type(a.experience)
    stacked = tree.stack([a, b])  # one buffer per seed
    assert type(stacked.experience) is type(a.experience)
    assert stacked.experience.group0.shape == (2, 4, 42)


def test_a_sampled_item_is_a_copy_of_its_row():
    buf = fb.flat(8)
    batch = {k: torch.randn(8, *v.shape).to(v.dtype) for k, v in TRANSITION.items()}
    state = buf.add(buf.init(TRANSITION), batch)
    before = tree.map(torch.clone, fb.storage_items(state.experience))
    sample = buf.sample(state, frandom.key(0), 5)
    assert tree.tree_equal(sample.items, tree.map(lambda x: x[sample.indices], batch))
    sample.items["obs"].add_(1.0)
    assert tree.tree_equal(fb.storage_items(state.experience), before)


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
    # a NamedTuple item with a tuple, a dict and None: traced code rebuilds it from the skeleton
    buf = fb.flat(5)
    added = [(step_batch(start, 3), frandom.key(start)) for start in (0, 3, 6)]
    mine, mine_sample = compiled_add_and_sample_equal_eager(buf, buf.init(STEP), added, 4)
    assert type(mine_sample.items) is Step and mine_sample.items.note is None
    assert tree.tree_equal(
        mine_sample.items, tree.map(lambda x: x[mine_sample.indices], fb.storage_items(mine.experience))
    )
    # traced, the structure check compares leaf paths: a renamed leaf is refused while tracing
    renamed = step_batch(0, 3)._replace(extra=(torch.arange(3), {"flog": torch.ones(3, dtype=torch.bool)}))
    with pytest.raises(Exception, match=r"missing leaves: .*flag.*unexpected leaves: .*flog"):
        funrl_compile(buf.add)(mine, renamed)


def test_a_saved_layout_that_does_not_match_its_tensors_is_refused(tmp_path):
    buf = fb.flat(4)
    state = buf.add(buf.init(STEP), step_batch(0, 3))
    fb.save(state, tmp_path / "ok")
    assert tree.tree_equal(fb.load(tmp_path / "ok"), state)
    meta_file = tmp_path / "ok" / "funrl_buffer.json"
    meta = json.loads(meta_file.read_text())
    packed = meta["spec"]["fields"][0][1]["packed"]
    for dtype, error in (
        ("float64", "do not match its item layout"),
        ("nonsense", "unknown dtype 'nonsense'"),
    ):
        broken = json.loads(json.dumps(meta))
        broken["spec"]["fields"][0][1]["packed"]["leaves"][0][0] = dtype
        assert packed["leaves"][0][0] == "float32"  # obs, the first leaf in tree order
        meta_file.write_text(json.dumps(broken))
        with pytest.raises(fb.BufferFileError, match=error):
            fb.load(tmp_path / "ok")


def test_a_buffer_saved_leaf_by_leaf_is_refused_by_name(tmp_path):
    fb.save(fb.flat(4).init(TRANSITION), tmp_path / "old")
    meta_file = tmp_path / "old" / "funrl_buffer.json"
    meta = json.loads(meta_file.read_text())
    meta["format"] = "funrl.buffers/1"
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(fb.BufferFileError, match="written by an earlier funrl, one tensor per leaf"):
        fb.load(tmp_path / "old")


def test_a_state_pickles_and_copies_into_the_same_packed_type(tmp_path):
    buf = fb.flat(4)
    state = buf.add(buf.init(STEP), step_batch(0, 3))
    for again in (pickle.loads(pickle.dumps(state)), copy.deepcopy(state)):
        assert type(again.experience) is type(state.experience)
        assert tree.tree_equal(again, state)
    torch.save(state, tmp_path / "state.pt")  # torch.save pickles too (loading needs weights_only=False)
    assert tree.tree_equal(torch.load(tmp_path / "state.pt", weights_only=False), state)


@given(
    capacity=st.integers(1, 12),
    sizes=st.lists(st.integers(0, 15), min_size=1, max_size=6),
    seed=st.integers(0, 2**31),
)
def test_eager_adds_write_the_rows_the_traced_add_writes(capacity, sizes, seed):
    # Eager, an add packs straight into the rows (or packs and copies two slices where they wrap);
    # under vmap it takes the traced path (pack, then one index_put_ per group). Same storage.
    buf = fb.flat(capacity)
    gen = torch.Generator().manual_seed(seed)
    eager = buf.init(TRANSITION)
    traced = tree.stack([buf.init(TRANSITION)])
    for size in sizes:
        batch = {k: torch.randn(size, *v.shape, generator=gen).to(v.dtype) for k, v in TRANSITION.items()}
        eager = buf.add(eager, batch)
        traced = torch.func.vmap(buf.add)(traced, tree.stack([batch]))
        assert tree.tree_equal(tree.stack([eager]), traced)


def test_several_bool_leaves_share_host_words_compiled_equal_to_eager():
    # 10 flag bytes (a mask, a 2x2 grid, a scalar) in 3 float words after 3 floats; an int64 leaf
    # stays in its own group. Traced, the words are built and read with shifts; eagerly the flags
    # are views of the row's bytes and the C++ add copies them.
    item = {
        "obs": torch.zeros(3),
        "id": torch.zeros((), dtype=torch.int64),
        "mask": torch.zeros(5, dtype=torch.bool),
        "grid": torch.zeros(2, 2, dtype=torch.bool),
        "done": torch.zeros((), dtype=torch.bool),
    }
    layout = ItemLayout.of(item)
    assert layout.dtypes == (torch.int64, torch.float32) and layout.widths == (1, 6)  # keys sorted
    gen = torch.Generator().manual_seed(3)

    def batch(start):
        ids = torch.arange(start, start + 4)
        return {
            "obs": ids[:, None].float().expand(4, 3).contiguous(),
            "id": ids,
            "mask": torch.rand(4, 5, generator=gen) < 0.5,
            "grid": torch.rand(4, 2, 2, generator=gen) < 0.5,
            "done": ids % 3 == 0,
        }

    buf = fb.flat(6)
    added = [(batch(start), frandom.key(start)) for start in (0, 4, 8)]
    mine, sample = compiled_add_and_sample_equal_eager(buf, buf.init(item), added, 5)
    every = {k: torch.cat([b[k] for b, _ in added]) for k in item}
    assert tree.tree_equal(sample.items, tree.map(lambda x: x[sample.items["id"]], every))


def test_a_big_endian_machine_keeps_a_bool_group(monkeypatch):
    # the traced shifts read byte k of a word as bits 8k..8k+7, which holds only little-endian
    monkeypatch.setattr("funrl.buffers._storage.sys.byteorder", "big")
    layout = ItemLayout.of(TRANSITION)
    assert layout.dtypes == (torch.float32, torch.bool) and layout.widths == (41, 1) and not layout.hosted
