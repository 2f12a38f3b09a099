"""Mixer (fixed proportions across buffers) and TensorDict conversion with TorchRL's keys."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from tensordict import TensorDict

import funrl.buffers as fb
from funrl import random as frandom
from funrl import tree

ITEM = {"obs": torch.zeros(2), "source": torch.zeros((), dtype=torch.int64)}


def filled(buf, source, n):
    return buf.add(
        buf.init(ITEM),
        {
            "obs": torch.randn(n, 2, generator=torch.Generator().manual_seed(n)),
            "source": torch.full((n,), source),
        },
    )


@given(
    props=st.lists(st.floats(0, 10), min_size=1, max_size=4).filter(lambda p: sum(p) > 0),
    batch_size=st.integers(1, 50),
)
def test_split_sizes_sum_to_the_batch_and_follow_proportions(props, batch_size):
    mix = fb.mixer([fb.flat(4)] * len(props), props)
    sizes = mix.split_sizes(batch_size)
    assert sum(sizes) == batch_size
    for size, p in zip(sizes, props, strict=True):
        assert abs(size - batch_size * p / sum(props)) < 1.0


def test_samples_come_from_each_buffer_in_proportion():
    online, offline = fb.flat(16), fb.prioritised(32)
    states = [filled(online, 0, 10), filled(offline, 1, 30)]
    mix = fb.mixer([online, offline], [0.25, 0.75])
    sample = mix.sample(states, frandom.key(0), 12)
    assert mix.split_sizes(12) == (3, 9)
    assert sample.items["source"].tolist() == [0] * 3 + [1] * 9
    keys = frandom.split(frandom.key(0), 2)
    assert tree.tree_equal(
        sample,
        tree.map(
            lambda a, b: torch.cat([a, b]),
            online.sample(states[0], keys[0], 3),
            offline.sample(states[1], keys[1], 9),
        ),
    )
    assert bool(mix.can_sample(states))
    assert not bool(mix.can_sample([online.init(ITEM), states[1]]))
    # a zero share is never sampled, nor required to be ready
    only_offline = fb.mixer([online, offline], [0, 1])
    assert bool(only_offline.can_sample([online.init(ITEM), states[1]]))
    assert (
        only_offline.sample([online.init(ITEM), states[1]], frandom.key(1), 5).items["source"].tolist()
        == [1] * 5
    )


def test_mixer_bad_input():
    with pytest.raises(ValueError, match="proportions: expected 2 values"):
        fb.mixer([fb.flat(2), fb.flat(2)], [1.0])
    with pytest.raises(ValueError, match="proportions: expected finite non-negative"):
        fb.mixer([fb.flat(2)], [-1.0])
    mix = fb.mixer([fb.flat(2), fb.flat(2)], [1, 1])
    with pytest.raises(ValueError, match="states: expected 2 buffer states"):
        mix.sample([filled(fb.flat(2), 0, 2)], frandom.key(0), 2)
    other = fb.flat(2)
    other_state = other.add(other.init({"x": torch.zeros(())}), {"x": torch.zeros(2)})
    with pytest.raises(ValueError, match="different tree structures"):
        mix.sample([filled(fb.flat(2), 0, 2), other_state], frandom.key(0), 2)


def transitions(n):
    g = torch.Generator().manual_seed(n)
    return {
        "obs": torch.randn(n, 3, generator=g),
        "action": torch.randn(n, 2, generator=g),
        "reward": torch.randn(n, generator=g),
        "done": torch.arange(n) % 3 == 0,
        "terminated": torch.arange(n) % 5 == 0,
        "truncated": torch.arange(n) % 7 == 0,
        "next_obs": torch.randn(n, 3, generator=g),
        "info": {"hidden": torch.randn(n, 4, generator=g)},
    }


def test_tensordict_uses_torchrl_keys_and_round_trips():
    items = transitions(6)
    td = fb.to_tensordict(items)
    assert td.batch_size == torch.Size([6])
    assert torch.equal(td["observation"], items["obs"])
    assert torch.equal(td["next", "observation"], items["next_obs"])
    assert td["next", "reward"].shape == (6, 1) and td["next", "done"].shape == (6, 1)
    assert torch.equal(td["next", "terminated"].squeeze(-1), items["terminated"])
    assert torch.equal(td["info", "hidden"], items["info"]["hidden"])
    assert tree.tree_equal(fb.from_tensordict(td), items)


def test_time_major_batches_convert_with_batch_dims():
    items = tree.map(lambda x: x.reshape(2, 3, *x.shape[1:]), transitions(6))
    td = fb.to_tensordict(items, batch_dims=2)
    assert td.batch_size == torch.Size([2, 3]) and td["next", "reward"].shape == (2, 3, 1)
    assert tree.tree_equal(fb.from_tensordict(td), items)


def test_data_moves_both_ways_with_a_torchrl_replay_buffer():
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(16))
    rb.extend(fb.to_tensordict(transitions(10)))
    # TorchRL -> funrl: the TorchRL storage's contents become a funrl buffer's items
    stored = fb.from_tensordict(rb[:].exclude("index"))
    buf = fb.flat(16)
    state = buf.add(buf.init(tree.index(stored, 0)), stored)
    assert tree.tree_equal(fb.items_in_order(state), transitions(10))
    # funrl -> TorchRL: a funrl sample extends a TorchRL buffer with the right keys
    sample = buf.sample(state, frandom.key(0), 4)
    rb.extend(fb.to_tensordict(sample.items))
    assert len(rb) == 14
    assert torch.equal(rb[10:14]["next", "observation"], sample.items["next_obs"])


def test_conversion_bad_input():
    with pytest.raises(TypeError, match="items: expected a dict"):
        fb.to_tensordict([torch.zeros(2)])
    with pytest.raises(ValueError, match="items: leaf 'b' has batch dims \\[3\\]"):
        fb.to_tensordict({"a": torch.zeros(2), "b": torch.zeros(3)})
    with pytest.raises(TypeError, match="td: expected a TensorDict"):
        fb.from_tensordict({"a": torch.zeros(2)})
    assert isinstance(fb.to_tensordict({"a": torch.zeros(2)}), TensorDict)
