"""save / load: exact round trips, atomic replacement, corrupted files refused, copy-on-write mmap."""

import json
import os

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import funrl.buffers as fb
from funrl import random as frandom
from funrl import tree

ITEM = {
    "obs": torch.zeros(3),
    "action": torch.zeros((), dtype=torch.int64),
    "extra": {"done": torch.zeros((), dtype=torch.bool), "h": (torch.zeros(2, dtype=torch.float16),)},
}


def batch(start, size):
    ids = torch.arange(start, start + size)
    return {
        "obs": ids[:, None].float().expand(size, 3) * 0.5,
        "action": ids,
        "extra": {"done": ids % 2 == 0, "h": (ids[:, None].half().expand(size, 2),)},
    }


def prioritised_state():
    buf = fb.prioritised(8, alpha=0.7)
    state = buf.add(buf.init(ITEM), batch(0, 11))
    state = buf.update_priorities(state, torch.tensor([1, 3]), torch.tensor([4.0, 0.25]))
    return buf, state


@given(
    kind=st.sampled_from(["flat", "trajectory", "prioritised"]), sizes=st.lists(st.integers(1, 9), max_size=4)
)
def test_round_trip_is_exact_and_resumes(tmp_path_factory, kind, sizes):
    path = tmp_path_factory.mktemp("buf") / "saved"
    if kind == "trajectory":
        buf = fb.trajectory(2, 9, 2)
        state = buf.init(ITEM)
        for i, size in enumerate(sizes):
            state = buf.add(state, tree.map(lambda x: x.expand(2, *x.shape).clone(), batch(10 * i, size)))
    else:
        buf = fb.flat(8) if kind == "flat" else fb.prioritised(8)
        state = buf.init(ITEM)
        for i, size in enumerate(sizes):
            state = buf.add(state, batch(10 * i, size))
    fb.save(state, path)
    for mmap in (True, False):
        loaded = fb.load(path, mmap=mmap)
        assert type(loaded) is type(state)
        assert tree.tree_equal(loaded, state)
        assert tree.structure(loaded) == tree.structure(state)
    # a restarted buffer continues exactly as the original would
    loaded = fb.load(path)
    more = (
        batch(100, 2)
        if kind != "trajectory"
        else tree.map(lambda x: x.expand(2, *x.shape).clone(), batch(100, 2))
    )
    original = buf.add(fb.copy_state(state), more)
    resumed = buf.add(loaded, more)
    assert tree.tree_equal(resumed, original)
    assert tree.tree_equal(buf.sample(resumed, frandom.key(1), 5), buf.sample(original, frandom.key(1), 5))


def test_prioritised_round_trip_keeps_priorities(tmp_path):
    buf, state = prioritised_state()
    fb.save(state, tmp_path / "p")
    loaded = fb.load(tmp_path / "p")
    assert torch.equal(loaded.sum_tree, state.sum_tree) and torch.equal(
        loaded.max_priority, state.max_priority
    )
    assert tree.tree_equal(buf.sample(loaded, frandom.key(0), 16), buf.sample(state, frandom.key(0), 16))


def test_mmap_load_is_copy_on_write(tmp_path):
    buf = fb.flat(6)
    state = buf.add(buf.init(ITEM), batch(0, 4))
    fb.save(state, tmp_path / "b")
    loaded = buf.add(fb.load(tmp_path / "b", mmap=True), batch(50, 4))
    assert int(loaded.count) == 8
    again = fb.load(tmp_path / "b")  # the saved copy is untouched (and its checksums still match)
    assert tree.tree_equal(again, state)


def test_save_replaces_atomically_and_cleans_up(tmp_path):
    buf = fb.flat(6)
    state = buf.add(buf.init(ITEM), batch(0, 2))
    fb.save(state, tmp_path / "b")
    state = buf.add(state, batch(2, 3))
    fb.save(state, tmp_path / "b")
    assert int(fb.load(tmp_path / "b").count) == 5
    assert sorted(os.listdir(tmp_path)) == ["b"]  # no temporary or old copies left behind


def test_failed_save_leaves_the_old_copy(tmp_path, monkeypatch):
    buf = fb.flat(6)
    state = buf.add(buf.init(ITEM), batch(0, 2))
    fb.save(state, tmp_path / "b")
    state = buf.add(state, batch(2, 3))

    def broken_dump(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(json, "dump", broken_dump)
    with pytest.raises(OSError, match="disk full"):
        fb.save(state, tmp_path / "b")
    monkeypatch.undo()
    assert int(fb.load(tmp_path / "b").count) == 2
    assert sorted(os.listdir(tmp_path)) == ["b"]


def saved(tmp_path):
    _, state = prioritised_state()
    fb.save(state, tmp_path / "p")
    return tmp_path / "p"


def test_truncated_file_is_refused(tmp_path):
    path = saved(tmp_path)
    leaf = path / "tensors" / "0.memmap"
    os.chmod(leaf, 0o644)
    with open(leaf, "r+b") as fh:
        fh.truncate(os.path.getsize(leaf) - 4)
    with pytest.raises(fb.BufferFileError, match="leaf 0 file .* expected .*truncated or missing"):
        fb.load(path)


def test_corrupted_bytes_are_refused(tmp_path):
    path = saved(tmp_path)
    leaf = path / "tensors" / "1.memmap"
    os.chmod(leaf, 0o644)
    with open(leaf, "r+b") as fh:
        fh.seek(3)
        byte = fh.read(1)
        fh.seek(3)
        fh.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(fb.BufferFileError, match="leaf 1 .* corrupted \\(checksum mismatch\\)"):
        fb.load(path)
    fb.load(path, verify=False)  # verification can be skipped knowingly


def test_missing_or_garbled_metadata_is_refused(tmp_path):
    path = saved(tmp_path)
    with pytest.raises(fb.BufferFileError, match="not a saved funrl buffer"):
        fb.load(tmp_path / "nothing")
    meta = path / "funrl_buffer.json"
    text = meta.read_text()
    meta.write_text(text[: len(text) // 2])
    with pytest.raises(fb.BufferFileError, match="corrupted"):
        fb.load(path)
    meta.write_text(json.dumps({**json.loads(text), "format": "other/9"}))
    with pytest.raises(fb.BufferFileError, match="format 'other/9'"):
        fb.load(path)
    (path / "tensors" / "2.memmap").unlink()
    meta.write_text(text)
    with pytest.raises(fb.BufferFileError, match="leaf 2 file"):
        fb.load(path)


def test_unknown_namedtuple_is_refused_without_importing(tmp_path):
    path = saved(tmp_path)
    meta = path / "funrl_buffer.json"
    data = json.loads(meta.read_text())
    data["spec"]["namedtuple"] = "some_module_never_imported:Evil"
    meta.write_text(json.dumps(data))
    with pytest.raises(fb.BufferFileError, match="not an imported class"):
        fb.load(path)


def test_stale_state_is_not_saved(tmp_path):
    buf = fb.flat(4)
    old = buf.init(ITEM)
    buf.add(old, batch(0, 1))
    with pytest.raises(fb.StaleStateError, match="save: state is stale"):
        fb.save(old, tmp_path / "b")
    assert not (tmp_path / "b").exists()


def test_stacked_states_save_and_check_per_buffer(tmp_path):
    buf = fb.flat(4)
    states = [buf.add(buf.init(ITEM), batch(0, n)) for n in (1, 2, 3)]
    stacked = tree.stack(states)
    fb.save(stacked, tmp_path / "s")  # counts differ per buffer: each is checked against its own
    assert tree.tree_equal(fb.load(tmp_path / "s"), stacked)
    stale = stacked._replace(count=stacked.count - torch.tensor([0, 1, 0]))
    with pytest.raises(fb.StaleStateError):
        fb.save(stale, tmp_path / "t")


@pytest.mark.parametrize("old", ["funrl.buffers/1", "funrl.buffers/2", "funrl.buffers/3"])
def test_a_buffer_of_an_earlier_format_is_refused_by_name(tmp_path, old):
    fb.save(fb.flat(4).init(ITEM), tmp_path / "old")
    meta_file = tmp_path / "old" / "funrl_buffer.json"
    meta = json.loads(meta_file.read_text())
    meta["format"] = old
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(
        fb.BufferFileError, match=f"format '{old}', expected 'funrl.buffers/4' .*written by an earlier funrl"
    ):
        fb.load(tmp_path / "old")
