"""Shared checks of the buffer tests."""

from funrl import buffers as fb
from funrl import tree
from funrl.control import compile as funrl_compile


def compiled_add_and_sample_equal_eager(buf, state, batches_and_keys, batch_size):
    """``add`` then ``sample`` as one compiled (fullgraph) step and eagerly, each from its own copy
    of ``state``; the states and samples must be equal after every step. Returns the compiled
    side's last ``(state, sample)``."""

    def step(state, batch, key):  # one graph for both: compile time is the cost here
        state = buf.add(state, batch)
        return state, buf.sample(state, key, batch_size)

    compiled = funrl_compile(step)
    eager, mine = state, fb.copy_state(state)
    for batch, key in batches_and_keys:
        eager, eager_sample = step(eager, batch, key)
        mine, mine_sample = compiled(mine, batch, key)
        assert tree.tree_equal(mine, eager)
        assert tree.tree_equal(mine_sample, eager_sample)
    return mine, mine_sample
