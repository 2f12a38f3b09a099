"""funrl.testing: property tests for your own RL algorithms and environments.

Requires ``hypothesis`` (``pip install hypothesis``); the rest of funrl does not. Three kinds of
tools, each usable from any test runner:

**Checkers** (:mod:`funrl.testing.checkers`) raise an ``AssertionError`` naming the first
differing leaf, its index and both values::

    assert_trees_close(actual, expected, rtol=1e-5, atol=1e-8)
    assert_pure(fn, *args)                         # same output twice, inputs untouched
    assert_vmap_equals_loop(fn, in_dims, *args)    # vmap(fn)(xs)[i] == fn(xs[i])
    assert_compile_equals_eager(fn, *args, atol=1e-6)
    assert_no_recompile(fn, [args_0, args_1, ...]) # one compile for all the calls
    assert_grad_finite(loss_fn, params, batch)
    check_env(env, params)                         # funrl.envs.check, and reset uses its key

**Strategies** (:mod:`funrl.testing.strategies`, hypothesis): ``keys()``, ``trajectories()``
(time-major ``[T, B]`` rollouts with realistic ``terminated``/``truncated`` patterns),
``q_trajectories()``, ``transitions()`` and ``transition_batches()`` for buffers,
``params(module)``, ``env_states(env_or_id)``, and hyper-parameter ranges ``gammas()``,
``lambdas()``, ``clip_epsilons()``, ``learning_rates()``.

**Invariant batteries** for algorithm families: each takes your function with the signature of
funrl's own, searches every invariant of the family with hypothesis
(``derandomize=True``, so a failure reproduces) and raises one ``AssertionError`` naming each
invariant that broke, with the smallest counter-example found::

    advantage_estimator_invariants(my_gae)       # shaped like funrl.losses.gae
    policy_loss_invariants(my_ppo_loss)          # shaped like funrl.losses.ppo_clip_loss
    td_target_invariants(my_n_step_target)       # shaped like funrl.losses.n_step_q_targets
    replay_buffer_invariants(make_my_buffer)     # capacity -> buffer shaped like funrl.buffers.flat

The invariants each battery checks are listed in its module's docstring
(:mod:`~funrl.testing.advantage`, :mod:`~funrl.testing.policy_loss`,
:mod:`~funrl.testing.td_target`, :mod:`~funrl.testing.replay`). Every battery takes
``max_examples`` (cases per invariant), ``only=[names]`` (a subset of its invariants) and
``shrink=False`` (report the first counter-example found, not the smallest: much faster when
only detection matters). Call a battery from a plain test function, not from inside another
``@given`` test.
"""

try:
    import hypothesis  # noqa: F401
except ImportError as err:
    raise ImportError(
        "funrl.testing needs hypothesis, which funrl itself does not install: pip install hypothesis"
    ) from err

from funrl.testing import strategies
from funrl.testing.advantage import advantage_estimator_invariants
from funrl.testing.checkers import (
    assert_compile_equals_eager,
    assert_grad_finite,
    assert_no_recompile,
    assert_pure,
    assert_trees_close,
    assert_vmap_equals_loop,
    check_env,
)
from funrl.testing.policy_loss import policy_loss_invariants
from funrl.testing.replay import replay_buffer_invariants
from funrl.testing.td_target import td_target_invariants

__all__ = [
    "strategies",
    "assert_trees_close",
    "assert_pure",
    "assert_vmap_equals_loop",
    "assert_compile_equals_eager",
    "assert_no_recompile",
    "assert_grad_finite",
    "check_env",
    "advantage_estimator_invariants",
    "policy_loss_invariants",
    "td_target_invariants",
    "replay_buffer_invariants",
]
