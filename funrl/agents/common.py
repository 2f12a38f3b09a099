"""What every agent shares: the :class:`Agent` record, environment set-up, and the outer loop.

An agent is built by ``make_train(config)`` and holds pure functions:

- ``init(key, **hparams) -> train_state`` (a NamedTuple pytree);
- ``update(train_state, key) -> (train_state, metrics)``, one whole iteration, compiled once;
- ``greedy_action(params, obs) -> action`` for evaluation.

``agent(key)`` (:func:`train`) runs the Python outer loop: the key for update ``i`` is
``fold_in(run_key, i)`` computed inside the compiled step from the state's update counter, so a
resumed run draws exactly the numbers an uninterrupted one would. A key of shape ``[S, 2]``
trains ``S`` seeds at once with ``torch.func.vmap`` over the update.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Protocol

import torch

from funrl import control, envs, random
from funrl import tree as ftree
from funrl.agents import registry
from funrl.agents.networks import check_network
from funrl.envs import wrappers
from funrl.envs.gymnasium_bridge import host_env_of

__all__ = [
    "Agent",
    "BatchedEnvLike",
    "NonFiniteError",
    "check_finite",
    "evaluate",
    "gradient_phase",
    "init_state",
    "make_batched_env",
    "make_step",
    "seed_keys",
    "static_key",
    "sweepable_values",
    "update_keys",
    "train",
    "warmup_updates",
    "with_num_envs",
]


class BatchedEnvLike(Protocol):
    num_envs: int

    def reset(self, key: torch.Tensor, params: Any = None) -> tuple[torch.Tensor, Any]: ...

    def step(self, key: torch.Tensor, state: Any, action: torch.Tensor, params: Any = None) -> Any: ...

    def draw_step(self, key: torch.Tensor, params: Any = None) -> Any: ...

    def step_with(self, draw: Any, state: Any, action: torch.Tensor, params: Any = None) -> Any: ...

    def observation_space(self, params: Any = None) -> envs.Space: ...

    def action_space(self, params: Any = None) -> envs.Space: ...


class OffPolicySchedule:
    """Derived sizes shared by the off-policy configs (fields ``num_envs``, ``num_steps``,
    ``total_steps``, ``train_frequency``): each update steps every env ``num_steps`` times and
    takes one gradient step per ``train_frequency`` transitions."""

    num_envs: int
    num_steps: int
    total_steps: int
    train_frequency: int

    @property
    def steps_per_update(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def num_updates(self) -> int:
        return self.total_steps // self.steps_per_update

    @property
    def gradient_steps(self) -> int:
        """Gradient steps per update: one per ``train_frequency`` transitions."""
        return self.steps_per_update // self.train_frequency


@dataclasses.dataclass(frozen=True)
class ContinuousOffPolicyConfig(OffPolicySchedule):
    """The fields SAC and TD3 share, with CleanRL's continuous-control defaults (buffer 1e5)."""

    env_id: str = "Pendulum-v1"
    total_steps: int = 20_000
    num_envs: int = 1
    num_steps: int = 1
    train_frequency: int = 1
    buffer_size: int = 100_000
    batch_size: int = 256
    gamma: float = 0.99
    tau: float = 0.005
    learning_starts: int = 1_000
    network: str = "auto"  # see funrl.agents.networks: an MLP, or MinAtar's CNN for [H, W, C] observations
    hidden_sizes: tuple[int, ...] = (256, 256)
    env_kwargs: tuple[tuple[str, Any], ...] = ()


def check_offpolicy_config(
    config: Any, positive_ints: tuple[str, ...] = (), unit_interval: tuple[str, ...] = ()
) -> None:
    """Checks shared by the off-policy configs (names the field, what was expected, what came).

    ``positive_ints`` and ``unit_interval`` name a config's own fields checked like the shared ones.
    """
    shared_ints = ("total_steps", "num_envs", "num_steps", "train_frequency", "buffer_size", "batch_size")
    for name in shared_ints + positive_ints:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: expected a positive int, got {value!r}")
    steps_per_update = config.num_envs * config.num_steps
    if steps_per_update % config.train_frequency:
        raise ValueError(
            f"train_frequency: expected a divisor of num_envs * num_steps = {steps_per_update}, "
            f"got {config.train_frequency}"
        )
    if config.total_steps < steps_per_update:
        raise ValueError(
            f"total_steps: expected at least num_envs * num_steps = {steps_per_update}, got {config.total_steps}"
        )
    if isinstance(config.learning_starts, bool) or not isinstance(config.learning_starts, int):
        raise ValueError(f"learning_starts: expected an int >= 0, got {config.learning_starts!r}")
    if config.learning_starts < 0:
        raise ValueError(f"learning_starts: expected an int >= 0, got {config.learning_starts}")
    for name in ("gamma", "tau") + unit_interval:
        if not 0.0 <= getattr(config, name) <= 1.0:
            raise ValueError(f"{name}: expected a value in [0, 1], got {getattr(config, name)}")
    check_network(config.network)


def sweepable_values(config: Any, overrides: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """The value of each sweepable hyper-parameter in ``names``: ``overrides[name]``, else the
    config's field of that name.

    Every agent's ``init(key, **overrides)`` goes through here, so an unknown name (a typo such as
    ``lr``) raises a ValueError naming ``hparams`` and the sweepable names, for every agent.
    """
    unknown = sorted(set(overrides) - set(names))
    if unknown:
        raise ValueError(f"hparams: unknown {unknown}; sweepable: {list(names)}")
    return {name: overrides.get(name, getattr(config, name)) for name in names}


def static_key(
    name: str, config: Any, hyperparams: Iterable[str], env: Any | None, device: torch.device
) -> tuple:
    """What an agent's compiled update depends on: agents with equal keys share one compiled step.

    ``config``'s fields but ``hyperparams`` (the floats that ride as tensors in the train state,
    which the update reads from there and never from the config), the agent's ``name`` and
    ``device``, and the ``env`` given to ``make_train`` by identity (``None``: the agent made its
    env from the config). An identity stays unique while the key is in use: the compiled step
    stored under it holds the agent, and so the env, alive.
    """
    blanked = frozenset(hyperparams)
    fields = tuple(
        (field.name, getattr(config, field.name))
        for field in dataclasses.fields(config)
        if field.name not in blanked
    )
    return (name, type(config), fields, torch.device(device), None if env is None else _Identity(id(env)))


@dataclasses.dataclass(frozen=True)
class _Identity:
    """An object in a static key by identity: it names a graph in this process only, so a step
    keyed by it is never saved for another process (:func:`make_step`)."""

    id: int


def _plain(part: Any) -> bool:
    """Whether ``part`` of a static key means the same in every process: built of None, bools,
    numbers, strings, devices and classes, in tuples and frozensets (a key is hashable)."""
    if part is None or isinstance(part, (bool, int, float, str, torch.device, type)):
        return True
    return isinstance(part, (tuple, frozenset)) and all(_plain(p) for p in part)


def float32_tensors(hparams_type: type, values: dict[str, Any], device: torch.device) -> Any:
    """``hparams_type`` (a NamedTuple) with each field ``values[field]`` as a float32 scalar tensor."""
    return hparams_type(
        **{
            name: torch.as_tensor(values[name], dtype=torch.float32, device=device)
            for name in hparams_type._fields
        }
    )


def contiguous_copy(tree: Any) -> Any:
    """Every leaf copied with standard strides.

    ``scan`` under ``torch.compile`` checks that the carry keeps its metadata, strides included;
    with one environment, reset returns size-1 views whose strides (e.g. ``(4,)`` or ``(0,)``)
    differ from what a step produces, so the carry is normalised first.
    """
    return ftree.map(lambda x: x.clone(memory_format=torch.contiguous_format), tree)


def replay_example(obs: torch.Tensor, action: torch.Tensor) -> dict[str, torch.Tensor]:
    """One replay item: ``obs``, ``action`` (like the given one), ``reward``, ``next_obs``, ``terminated``.

    ``obs`` is the batched ``[num_envs, ...]`` observation; observations are stored in their own
    dtype (MinAtar's bool frames stay bool) and the networks cast them at their input.
    """
    device = obs.device
    return {
        "obs": obs[0],
        "action": action,
        "reward": torch.zeros((), dtype=torch.float32, device=device),
        "next_obs": obs[0],
        "terminated": torch.zeros((), dtype=torch.bool, device=device),
    }


def episode_metrics(info: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``episode_return`` (mean over the episodes that ended; NaN if none) and ``episodes`` (their count)
    from a rollout's ``returned_episode`` statistics, without a host sync."""
    finished = info["returned_episode"]
    n_finished = finished.sum()
    episode_return = torch.where(finished, info["returned_episode_return"], 0.0).sum() / n_finished
    return {"episode_return": episode_return, "episodes": n_finished}


def masked(active: torch.Tensor, new: Any, old: Any) -> Any:
    """``new`` where ``active`` else ``old``, leaf by leaf (branch-free)."""
    return ftree.map(lambda n, o: torch.where(active, n, o), new, old)


def update_keys(key: torch.Tensor, num_steps: int, keys_per_step: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """An update's rollout key and the keys of its ``num_steps`` gradient steps (or epochs), all
    from one ``split`` (a split costs its Threefry rounds whatever its size, so no chain of them).

    Returns ``(key_rollout [2], step_keys)``: ``step_keys`` is ``[num_steps, 2]``, or
    ``[num_steps, keys_per_step, 2]`` when a step needs ``keys_per_step > 1`` keys.
    """
    keys = random.split(key, 1 + num_steps * keys_per_step)
    step_shape = (num_steps, keys_per_step, 2) if keys_per_step > 1 else (num_steps, 2)
    return keys[0], keys[1:].reshape(step_shape)


def warmup_updates(learning_starts: int, steps_per_update: int) -> int:
    """How many updates come before an off-policy agent learns: update ``u`` (from 1) takes its
    gradient steps once its buffer holds more than ``learning_starts`` transitions, ``u *
    steps_per_update > learning_starts`` (CleanRL's ``global_step > learning_starts``)."""
    return learning_starts // steps_per_update


def gradient_phase(
    learning: torch.Tensor,
    gradient_step: Callable[[Any, torch.Tensor], tuple[Any, dict[str, torch.Tensor]]],
    carry: Any,
    step_keys: torch.Tensor,
    metric_names: Iterable[str],
    waiting_metrics: Callable[[Any], dict[str, torch.Tensor]] | None = None,
) -> tuple[Any, dict[str, torch.Tensor]]:
    """An off-policy update's gradient steps: ``(carry, metrics averaged over the steps)``.

    While not ``learning`` (a bool scalar: the update is one of :func:`warmup_updates`), the
    carry is returned as it is and each of ``metric_names`` is NaN, nothing having been trained
    (:func:`check_finite` allows it there), except those ``waiting_metrics(carry)`` gives. A
    :func:`funrl.control.cond`: an eager update skips the gradient steps it would throw away; a
    compiled or vmapped one computes them and keeps the old carry, branch-free.
    """
    names = tuple(metric_names)

    def learn(carry: Any) -> tuple[Any, dict[str, torch.Tensor]]:
        carry, step_metrics = control.scan(gradient_step, carry, step_keys)
        return carry, {k: step_metrics[k].mean() for k in names}

    def wait(carry: Any) -> tuple[Any, dict[str, torch.Tensor]]:
        nan = torch.full((), float("nan"), device=step_keys.device)
        metrics = dict.fromkeys(names, nan)
        metrics.update(waiting_metrics(carry) if waiting_metrics is not None else {})
        return carry, metrics

    return control.cond(learning, learn, wait, carry)


class NonFiniteError(FloatingPointError):
    """A metric (a loss, a gradient norm, ...) became NaN or infinite; names the update, the seed and the metric."""


@dataclasses.dataclass(frozen=True)
class Agent:
    """The pure pieces of an agent, and ``__call__ = train``.

    ``static_key`` (:func:`static_key`) names what ``update``'s graph depends on: agents with
    equal keys share one compiled step (:func:`make_step`), so a config that differs only in
    float hyper-parameters trains without recompiling. ``None``: the agent shares its compiled
    step with no other agent.
    """

    name: str
    config: Any
    init: Callable[..., Any]
    update: Callable[[Any, torch.Tensor], tuple[Any, dict[str, torch.Tensor]]]
    num_updates: int
    steps_per_update: int
    greedy_action: Callable[[dict[str, torch.Tensor], torch.Tensor], torch.Tensor]
    env: Any
    env_params: Any
    device: torch.device
    static_key: Hashable | None = None
    warmup_updates: int = 0  # the first updates, which train nothing (see gradient_phase)

    def __call__(self, key: torch.Tensor, **kwargs: Any) -> tuple[Any, dict[str, torch.Tensor]]:
        return train(self, key, **kwargs)


def make_batched_env(
    env_id: str,
    num_envs: int,
    env: Any | None,
    env_kwargs: dict[str, Any],
    normalize_obs: bool | None,
    normalize_reward: bool | None,
    gamma: float = 0.99,
) -> tuple[Any, Any, bool]:
    """``(batched_env, env_params, continuous)`` for an agent.

    A funrl id is made, wrapped per environment (``ClipAction`` for continuous actions, episode
    statistics always) and batched with ``funrl.envs.vmap``; observation/reward normalisation
    (when asked, or by default for continuous actions) wraps the batched view, so its running
    mean/var is one set shared by the ``num_envs`` envs and updated with the whole batch each
    step, as gymnasium's vector wrappers (CleanRL's and SB3's continuous PPO) do. A host
    gymnasium env (``funrl.envs.from_gymnasium``, already batched) gets the same wrappers on its
    batched view. Any other ready batched ``env`` is used as it is; it must report
    ``returned_episode`` statistics in its info. A given ``env`` must hold ``num_envs`` environments.
    """
    if env is None:
        single, params = envs.make(env_id, **env_kwargs)
    else:
        if isinstance(env, tuple):
            raise TypeError(
                "env: expected the env itself, got a tuple (from_gymnasium returns (env, params))"
            )
        host = host_env_of(env)
        held = host.num_envs if host is not None else getattr(env, "num_envs", num_envs)
        if held != num_envs:
            raise ValueError(f"num_envs: the config says {num_envs}, the given env holds {held}")
        params = getattr(env, "default_params", None)
        if host is None:
            return env, params, isinstance(env.action_space(params), envs.Box)
        single = env  # already batched: the wrappers below see its whole batch
    continuous = isinstance(single.action_space(params), envs.Box)
    if continuous:
        single = wrappers.ClipAction(single)
    single = wrappers.EpisodeStatistics(single)  # raw returns: inside the reward normalisation
    batched = envs.vmap(single, num_envs) if env is None else single
    if normalize_obs if normalize_obs is not None else continuous:
        batched = wrappers.NormalizeObservation(batched)
    if normalize_reward if normalize_reward is not None else continuous:
        batched = wrappers.NormalizeReward(batched, gamma=gamma)
    return batched, params, continuous


def with_num_envs(benv: Any, num_envs: int) -> Any:
    """The wrapper chain of ``benv`` around a fresh ``funrl.envs.vmap`` view of ``num_envs`` envs.

    ``benv`` unchanged when it holds no funrl batched view (a host gymnasium env cannot be copied).
    """
    if isinstance(benv, envs.BatchedEnv):
        return envs.vmap(benv.env, num_envs)
    if isinstance(benv, wrappers.Wrapper):
        inner = with_num_envs(benv.env, num_envs)
        if inner is not benv.env:
            resized = copy.copy(benv)  # wrappers hold only static options and their inner env
            resized.env = inner
            return resized
    return benv


def seed_keys(seed: int, num_seeds: int | None) -> torch.Tensor:
    """The run key of seed ``seed`` (``[2]``), or ``[num_seeds, 2]`` keys ``fold_in(key(seed), i)``."""
    base = random.key(seed)
    if num_seeds is None:
        return base
    return torch.stack([random.fold_in(base, i) for i in range(num_seeds)])


def _batched(key: torch.Tensor) -> bool:
    if key.dtype != torch.int64 or key.shape[-1:] != (2,) or key.dim() not in (1, 2):
        raise ValueError(
            f"key: expected int64 of shape [2] or [num_seeds, 2], got {key.dtype} {list(key.shape)}"
        )
    return key.dim() == 2


def _check_host_env(agent: Agent, batched: bool, compile: bool) -> None:
    """A host gymnasium env (``from_gymnasium``) trains one seed, eagerly: say so before tracing."""
    if host_env_of(agent.env) is None:
        return
    if batched:
        raise ValueError(
            "key: expected one key of shape [2]: the agent's env is a host gymnasium env "
            "(from_gymnasium), one set of envs that cannot be vmapped over seeds; train each seed "
            "with its own agent and from_gymnasium env"
        )
    if compile:
        raise ValueError(
            "compile: the agent's env is a host gymnasium env (from_gymnasium), which torch.compile "
            "cannot trace; pass compile=False"
        )


_COMPILED_STEPS: dict[Hashable, Callable] = {}
"""The compiled steps of this process, by agent (its ``static_key``), batching, mode and compiler."""


def make_step(agent: Agent, batched: bool, compile: bool, mode: str | None = None) -> Callable:
    """``step(train_state, run_key) -> (train_state, metrics)``: update keyed by ``fold_in(run_key, count)``.

    ``batched``: vmapped over a leading seed dimension of both. ``compile``: one graph, built by
    :func:`funrl.control.compile` (``mode`` as there, e.g. ``"reduce-overhead"`` for CUDA graphs)
    once per process for all agents sharing ``agent.static_key``: the first such agent's step
    serves the others, whose updates differ only in what their train states hold.
    """
    _check_host_env(agent, batched, compile)

    def step(state: Any, run_key: torch.Tensor) -> tuple[Any, dict[str, torch.Tensor]]:
        return agent.update(state, random.fold_in(run_key, state.update_count))

    fn = torch.func.vmap(step, randomness="error") if batched else step
    if not compile:
        return fn
    # One compiled callable per static key, so reuse does not hang on which closures and objects
    # dynamo's guards accept from a new agent. The update's code is part of the key: an agent
    # given another update (dataclasses.replace) keeps its static key but not this step. An agent
    # without a key shares with itself only (its id stays unique: the entry keeps it alive). The
    # compiler is part of the key too, so a step made by another compiler (a test's) is not reused.
    update_code = getattr(agent.update, "__code__", agent.update)
    owner = (agent.static_key, update_code) if agent.static_key is not None else id(agent)
    cache_key = (owner, batched, mode, control.compile)
    compiled = _COMPILED_STEPS.get(cache_key)
    if compiled is None:
        # A key of plain values names the same graph in a later process, which then loads the
        # step instead of tracing it; the update's code is named by where it is (its source is
        # checked when the step loads).
        saved_as = None
        if agent.static_key is not None and _plain(agent.static_key) and hasattr(update_code, "co_qualname"):
            where = (update_code.co_filename, update_code.co_firstlineno, update_code.co_qualname)
            saved_as = repr(("make_step", agent.static_key, where, batched, mode))
        # Static shapes, as jax.jit: the float hyper-parameters are inputs (train-state tensors).
        compiled = control.compile(
            fn,
            fullgraph=True,
            dynamic=False,
            mode=mode,
            device=agent.device,
            saved_as=saved_as,
            saved_refs={"agent": agent},
        )
        _COMPILED_STEPS[cache_key] = compiled
    return compiled


def init_state(
    agent: Agent, key: torch.Tensor, hparams: dict[str, Any] | None = None
) -> tuple[Any, torch.Tensor]:
    """``(train_state, run_key)`` for one key ``[2]`` or a batch ``[S, 2]``; hparams may be per seed."""
    hparams = hparams or {}
    batched = _batched(key)
    _check_host_env(agent, batched, compile=False)

    def one(k: torch.Tensor, hp: dict[str, Any]) -> tuple[Any, torch.Tensor]:
        key_init, key_run = random.split(k)
        return agent.init(key_init.to(agent.device), **hp), key_run.to(agent.device)

    if not batched:
        return one(key, hparams)
    per_seed = []
    for i in range(key.shape[0]):
        hp = {
            name: (value[i] if isinstance(value, torch.Tensor) and value.dim() > 0 else value)
            for name, value in hparams.items()
        }
        per_seed.append(one(key[i], hp))
    return ftree.stack([s for s, _ in per_seed]), torch.stack([k for _, k in per_seed])


def check_finite(
    metrics: dict[str, torch.Tensor],
    first_update: int,
    may_be_nan: frozenset[str] = registry.MAY_BE_NAN,
    warmup_updates: int = 0,
) -> None:
    """Raise :class:`NonFiniteError` naming the update, seed and metric of the first non-finite value
    of any metric outside ``may_be_nan`` (losses, gradient norms and every other metric an agent adds).
    In the first ``warmup_updates`` updates, which train nothing (:func:`gradient_phase`), a
    metric may be NaN (not infinite).

    ``metrics[name]`` has shape ``[updates]`` or ``[updates, seeds]`` (host tensors); its first row
    is update number ``first_update`` (1-based: the state after it has ``update_count`` equal to it).
    A breakdown ``name/part`` (e.g. one team's ``episode_return/adversary``) may be NaN where
    ``name`` may.
    """
    for name, values in metrics.items():
        if name in may_be_nan or name.split("/", 1)[0] in may_be_nan:
            continue
        bad = ~torch.isfinite(values)
        if first_update <= warmup_updates:  # rows of updates that trained nothing may hold NaN
            warming_up = torch.arange(first_update, first_update + values.shape[0]) <= warmup_updates
            bad &= ~(values.isnan() & warming_up.reshape(-1, *[1] * (values.dim() - 1)))
        if bool(bad.any()):
            where = torch.nonzero(bad)[0].tolist()
            update = first_update + where[0]
            seed = where[1] if len(where) > 1 else 0
            raise NonFiniteError(
                f"non-finite {name} ({values[tuple(where)].item()}) at update {update}, seed {seed}"
            )


def train(
    agent: Agent,
    key: torch.Tensor,
    *,
    compile: bool = True,
    hparams: dict[str, Any] | None = None,
    state: Any | None = None,
    run_key: torch.Tensor | None = None,
    num_updates: int | None = None,
    callback: Callable[[int, Any, dict[str, torch.Tensor]], None] | None = None,
    log_every: int = 10,
    compile_mode: str | None = None,
) -> tuple[Any, dict[str, torch.Tensor]]:
    """Train ``agent`` from ``key`` (``[2]``: one seed; ``[S, 2]``: ``S`` seeds vmapped).

    An agent on a host gymnasium env (``from_gymnasium``) trains one key ``[2]`` with
    ``compile=False``: its envs are one stateful set on the host (a ValueError says so otherwise).

    Args:
        compile: compile the update step once with ``torch.compile(fullgraph=True)``.
        compile_mode: ``mode`` of :func:`make_step`.
        hparams: overrides of sweepable hyper-parameters; a tensor with leading ``[S]`` gives
            one value per seed (a sweep in one call).
        state, run_key: continue from a train state (resume); both or neither.
        num_updates: how many updates to run (default: until ``agent.num_updates`` in total).
        callback: ``callback(update_index, state, host_metrics)`` every ``log_every`` updates,
            after the metrics were checked for non-finite values (checkpointing goes here).

    Raises:
        NonFiniteError: a metric became NaN or infinite (every metric but those the agent's
            registration declares may be NaN, :func:`funrl.agents.registry.may_be_nan`); the
            callback has not seen that stretch of updates.

    Returns:
        ``(train_state, metrics)`` with every metric stacked over updates (``[U]`` or ``[U, S]``).
    """
    batched = _batched(key)
    _check_host_env(agent, batched, compile)
    if (state is None) != (run_key is None):
        raise ValueError("state, run_key: pass both to resume, or neither")
    if state is None:
        state, run_key = init_state(agent, key, hparams)
    done = int(state.update_count.reshape(-1)[0])
    remaining = agent.num_updates - done if num_updates is None else num_updates
    # A vmapped run of one seed (a [1, 2] key, as `funrl train` makes) steps unbatched, on views
    # without the seed dimension: vmapped seed i equals the single run of seed i, and one seed
    # needs no vmap. Callbacks and the result see the seed dimension as before.
    one_seed = batched and key.shape[0] == 1
    if one_seed:
        state, run_key = ftree.map(lambda x: x.squeeze(0), state), run_key.squeeze(0)

    def with_seed_dim(tree: Any) -> Any:
        return ftree.map(lambda x: x.unsqueeze(0), tree) if one_seed else tree

    def host_with_seed_dim(host: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {k: v.unsqueeze(-1) for k, v in host.items()} if one_seed else host

    step = make_step(agent, batched and not one_seed, compile, compile_mode)
    may_be_nan = registry.may_be_nan(agent.name)
    history: list[dict[str, torch.Tensor]] = []
    pending: list[dict[str, torch.Tensor]] = []
    for i in range(done, done + remaining):
        state, metrics = step(state, run_key)
        pending.append(metrics)
        last = i == done + remaining - 1
        if len(pending) >= log_every or last:
            host = {k: torch.stack([m[k] for m in pending]).detach().cpu() for k in pending[0]}
            host = host_with_seed_dim(host)
            check_finite(host, i + 2 - len(pending), may_be_nan, agent.warmup_updates)
            history.append(host)
            pending = []
            if callback is not None:
                callback(i + 1, with_seed_dim((state, run_key)), host)
    state = with_seed_dim(state)
    if not history:
        return state, {}
    merged = {k: torch.cat([h[k] for h in history]) for k in history[0]}
    return state, merged


def evaluate(
    agent: Agent,
    params: dict[str, torch.Tensor],
    key: torch.Tensor,
    episodes: int,
    max_steps: int | None = None,
) -> torch.Tensor:
    """Undiscounted returns of ``episodes`` greedy episodes (``[episodes]``) on fresh environments.

    Runs one environment per episode (a fresh batched view of the agent's environment) until each
    has finished its first episode; observation normalisation, if any, starts from fresh
    statistics as in a new environment. A host gymnasium env (``from_gymnasium``) cannot be
    copied: its own ``num_envs`` envs are reset (a training state on it is stale afterwards), so
    ``episodes`` must equal its ``num_envs``.
    """
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"episodes: expected a positive int, got {episodes!r}")
    benv = agent.env
    host = host_env_of(benv)
    if host is not None and episodes != host.num_envs:
        raise ValueError(
            f"episodes: the agent's host gymnasium env runs its {host.num_envs} envs at once; "
            f"expected episodes={host.num_envs}, got {episodes}"
        )
    eval_env = with_num_envs(benv, episodes)
    obs, env_state = eval_env.reset(key.to(agent.device), agent.env_params)
    limit = max_steps or getattr(agent.env_params, "max_steps_in_episode", 0) or 10_000
    returns = torch.zeros(episodes, dtype=torch.float32, device=agent.device)
    finished = torch.zeros(episodes, dtype=torch.bool, device=agent.device)
    for t in range(int(limit) + 1):
        with torch.no_grad():
            action = agent.greedy_action(params, obs)
        obs, env_state, reward, terminated, truncated, info = eval_env.step(
            random.fold_in(key, t).to(agent.device), env_state, action, agent.env_params
        )
        ended = info["returned_episode"] & ~finished
        returns = torch.where(ended, info["returned_episode_return"].to(torch.float32), returns)
        finished = finished | info["returned_episode"]
        if bool(finished.all()):
            break
    return returns
