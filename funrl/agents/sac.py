"""SAC (Haarnoja et al. 2018, with the learned temperature of "SAC Algorithms and Applications")
as one pure update step.

``make_train(config)`` builds an :class:`~funrl.agents.common.Agent` whose ``update(train_state,
key)`` does one iteration: ``num_steps`` steps of ``num_envs`` environments with actions sampled
from the tanh-Gaussian policy (uniform random actions before ``learning_starts``), one in-place
``add`` of the transitions to a :func:`funrl.buffers.flat` replay buffer held in the train state,
then ``num_envs * num_steps // train_frequency`` gradient steps (a :func:`funrl.control.scan`):
twin critics as one stacked-params ensemble (``funrl.losses.sac_critic_objective``, one ``vmap``),
the actor, the temperature, and a Polyak target update. ``torch.compile`` makes the iteration one
graph. Until the buffer holds ``learning_starts`` transitions the gradient steps are a
:func:`funrl.control.cond` that keeps the old params (their metrics are NaN, but ``alpha``):
skipped eagerly, computed and dropped in the branch-free compiled step.

Batches are drawn by environment: row ``i`` of a batch belongs to environment ``e`` (each holds a
contiguous block of ``batch_size / num_envs`` rows, the first ``batch_size % num_envs`` one more)
and is a transition drawn uniformly from ``e``'s own, with row ``i`` of ``split(key, batch_size)``,
which also draws the policy noise of that row's losses. With one environment that is uniform
sampling of the buffer. The buffer keeps a transition's time slot in its row (``slot * num_envs +
e``), so it holds ``buffer_size`` rounded down to a multiple of ``num_envs``. This is what lets a
data-parallel agent (``make_train(..., data_parallel=...)``) keep each rank's environments'
transitions in the rank's own replay buffer and still train the agent of one process holding
every environment.

Defaults follow CleanRL's ``sac_continuous_action.py`` (256-256 ReLU actor and critics, state-
dependent log-std in [-5, 2], Adam: actor 3e-4, critics and temperature 1e-3, batch 256, γ 0.99,
τ 0.005, target entropy ``-dim(A)``, one environment, one gradient step per transition), except:
the actor and temperature step with every critic step (CleanRL takes two every second step; the
same count), learning starts after 1e3 transitions instead of 5e3 and the buffer holds 1e5 (not
1e6) transitions, sized for the 2e4-step Pendulum-v1 budget of BENCHMARKS.md. The actor acts in
``[-1, 1]``; the environment receives ``low + (a + 1) (high - low) / 2``; the buffer stores ``a``.

The float hyper-parameters (:data:`SWEEPABLE`) ride as tensors in the train state -- the rates in
the optimisers' states, γ and τ in ``hparams``, ``alpha`` as the initial (or, without
``autotune``, fixed) ``log_alpha`` -- and ``update`` reads them from there only: configs that
differ in them share one compiled step, and a sweep is a ``vmap``.

Purity: as for DQN, ``update`` is pure except that the buffer ``add`` writes into the storage of
the state it is given (donation, see :mod:`funrl.buffers`); fresh copies of a state give the same
outputs (tested).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from funrl import buffers, envs, nets, optim, random
from funrl import losses as L
from funrl import tree as ftree
from funrl.agents.common import (
    Agent,
    BatchedEnvLike,
    ContinuousOffPolicyConfig,
    check_offpolicy_config,
    contiguous_copy,
    episode_metrics,
    float32_tensors,
    gradient_phase,
    make_batched_env,
    replay_example,
    static_key,
    sweepable_values,
    update_keys,
    warmup_updates,
)
from funrl.agents.networks import make_network
from funrl.agents.registry import register_agent
from funrl.buffers.flat_buffer import gather
from funrl.distributed import DataParallel, shard_envs

__all__ = ["NAME", "SWEEPABLE", "SACConfig", "SACHyperParams", "SACTrainState", "make_train"]

NAME = "sac"


@dataclasses.dataclass(frozen=True)
class SACConfig(ContinuousOffPolicyConfig):
    """Static SAC configuration (compile specialises on it). Steps count environment transitions."""

    policy_lr: float = 3e-4
    q_lr: float = 1e-3
    autotune: bool = True
    alpha: float = 0.2

    def __post_init__(self) -> None:
        check_offpolicy_config(self)
        for name in ("policy_lr", "q_lr"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: expected a value > 0, got {getattr(self, name)}")
        if not self.alpha > 0:
            raise ValueError(f"alpha: expected a value > 0, got {self.alpha}")
        if self.buffer_size < self.num_envs:  # every environment keeps at least one transition
            raise ValueError(
                f"buffer_size: expected at least num_envs = {self.num_envs}, got {self.buffer_size}"
            )


class SACHyperParams(NamedTuple):
    """Float32 scalar tensors in the train state (the rates are in the optimisers' states)."""

    gamma: torch.Tensor
    tau: torch.Tensor


METRICS = ("critic_loss", "actor_loss", "alpha_loss", "alpha", "q_mean", "entropy", "grad_norm")
"""What an update reports of its gradient steps (averaged over them; NaN but ``alpha`` before it learns)."""

SWEEPABLE = ("policy_lr", "q_lr", *SACHyperParams._fields, "alpha")
"""The config fields that ride in the train state: the names ``init(key, **hparams)`` takes (any
other raises). The actor's rate, the critics' and temperature's rate (each a tensor of its
optimiser's state), γ, τ and the initial temperature. The compiled step does not depend on them."""


class SACTrainState(NamedTuple):
    params: dict[str, dict[str, torch.Tensor]]  # {"actor": ..., "critic": stacked [2, ...]}
    target_critic: dict[str, torch.Tensor]
    actor_opt: Any  # inject_hyperparams(adam) states: the learning rates are tensors of them
    critic_opt: Any
    log_alpha: torch.Tensor
    alpha_opt: Any
    buffer: buffers.FlatState
    env_state: Any
    obs: torch.Tensor
    update_count: torch.Tensor
    hparams: SACHyperParams


class ContinuousSetup(NamedTuple):
    """What SAC and TD3 share: the batched env, its params, sizes and the action map to the env."""

    env: Any
    env_params: Any
    obs_shape: tuple[int, ...]
    action_dim: int
    to_env: Callable[[torch.Tensor], torch.Tensor]


def continuous_setup(
    config: Any, env: BatchedEnvLike | None, device: torch.device, dp: DataParallel | None = None
) -> ContinuousSetup:
    """A batched env with a Box action space (no normalisation wrappers) and ``[-1, 1] -> [low, high]``.

    With ``dp`` of several ranks, this rank's block of the ``config.num_envs`` environments
    (:func:`funrl.distributed.shard_envs`).
    """
    dp = dp or DataParallel()
    if env is not None and dp.world_size > 1:
        raise ValueError("env: a data-parallel agent makes its own environments; expected None")
    benv, env_params, continuous = make_batched_env(
        config.env_id, len(dp.local_block(config.num_envs)), env, dict(config.env_kwargs), False, False
    )
    benv = shard_envs(benv, dp, config.num_envs)
    arg, name = ("env_id", config.env_id) if env is None else ("env", env.name)
    if not continuous:
        raise ValueError(f"{arg}: expected continuous (Box) actions, {name} has discrete actions")
    # The bounds of the env itself: make_batched_env's ClipAction declares an unbounded space.
    if env is None:
        raw, raw_params = envs.make(config.env_id, **dict(config.env_kwargs))
        space = raw.action_space(raw_params)
    else:
        space = env.action_space(env_params)
    low = torch.as_tensor(space.low, dtype=torch.float32, device=device).expand(space.shape)
    high = torch.as_tensor(space.high, dtype=torch.float32, device=device).expand(space.shape)
    if not bool(torch.isfinite(low).all() & torch.isfinite(high).all()):
        raise ValueError(f"{arg}: expected finite action bounds, got low={space.low} high={space.high}")
    scale, bias = (high - low) / 2.0, (high + low) / 2.0
    return ContinuousSetup(
        env=benv,
        env_params=env_params,
        obs_shape=tuple(benv.observation_space(env_params).shape),
        action_dim=math.prod(space.shape),
        to_env=lambda a: a * scale + bias,
    )


def twin_critic(config: Any, setup: ContinuousSetup) -> torch.nn.Module:
    """``Q(s, a)``: the critic network of SAC and TD3 (stacked twice into twin critics)."""
    return make_network(
        config.network,
        setup.obs_shape,
        config.hidden_sizes,
        lambda features, hidden: nets.ContinuousQ(features, setup.action_dim, hidden),
        critic=True,
    )


def init_actor_and_twin_critics(
    actor: torch.nn.Module,
    critic: torch.nn.Module,
    key_actor: torch.Tensor,
    key_critic: torch.Tensor,
    device: torch.device,
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """``(actor_params, critic_params)`` on ``device``; the twin critics stacked ``[2, ...]`` (one ensemble)."""
    actor_params = {k: v.to(device) for k, v in nets.init(actor, key_actor).items()}
    critic_params = {k: v.to(device) for k, v in nets.init_ensemble(critic, key_critic, 2).items()}
    return actor_params, critic_params


def collect(
    setup: ContinuousSetup,
    policy: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    key: torch.Tensor,
    obs: torch.Tensor,
    env_state: Any,
    num_steps: int,
    dp: DataParallel | None = None,
) -> tuple[envs.RolloutState, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Step the envs ``num_steps`` times with ``policy(key, obs) -> action in [-1, 1]``.

    Returns ``(rollout_state, transitions with leaves [num_steps * num_envs, ...], episode metrics)``;
    ``next_obs`` is the pre-reset observation, so truncated episodes bootstrap from it. With
    ``dp`` of several ranks the episode metrics are those of every rank's environments.
    """

    def act(k: torch.Tensor, o: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        action = policy(k, o)
        return setup.to_env(action), {"action": action}

    rollout_state, traj = envs.rollout(
        setup.env, setup.env_params, act, key, contiguous_copy((obs, env_state)), num_steps
    )
    n = traj.reward.numel()
    transitions = {
        "obs": traj.obs.reshape(n, *setup.obs_shape),
        "action": traj.extras["action"].reshape(n, setup.action_dim),
        "reward": traj.reward.reshape(n).to(torch.float32),
        "next_obs": traj.final_obs.reshape(n, *setup.obs_shape),
        "terminated": traj.terminated.reshape(n),
    }
    # [T, envs of this rank] -> [T, all envs]: the metrics of the whole agent, on every rank.
    dp = dp or DataParallel()
    finished = {
        k: dp.all_gather(traj.info[k], dim=1) for k in ("returned_episode", "returned_episode_return")
    }
    return rollout_state, transitions, episode_metrics(finished)


def make_train(
    config: SACConfig,
    env: BatchedEnvLike | None = None,
    device: str = "cpu",
    data_parallel: DataParallel | None = None,
) -> Agent:
    """Build SAC for ``config``: an :class:`~funrl.agents.common.Agent` (init, update, greedy_action).

    Args:
        config: the static configuration.
        env: a batched environment with Box actions; by default ``config.env_id`` from funrl.
        device: where params, buffer and env state live.
        data_parallel: this process's rank in a data-parallel agent
            (:func:`funrl.distributed.data_parallel`; default: one process). Each rank steps its
            block of the ``config.num_envs`` environments with the keys one process would give
            them and keeps their transitions in its own replay buffer (``buffer_size`` divided
            over the ranks); each gradient step, it takes its environments' shares of the draws
            one process would make for the batch, and the gradients of the critics,
            the actor and the temperature (with the loss metrics) are averaged over the ranks by
            one all-reduce each inside the compiled update. So every rank holds the same params,
            those of one process with all the environments (up to float rounding of the sums).
    """
    if not isinstance(config, SACConfig):
        raise TypeError(f"config: expected a SACConfig, got {type(config).__name__}")
    device = torch.device(device)
    dp = data_parallel or DataParallel()
    setup = continuous_setup(config, env, device, dp)
    actor = make_network(
        config.network,
        setup.obs_shape,
        config.hidden_sizes,
        lambda features, hidden: nets.GaussianActor(
            features, setup.action_dim, hidden, "relu", state_dependent_std=True
        ),
    )
    critic = twin_critic(config, setup)
    my_envs = dp.local_block(config.num_envs)
    local_envs = len(my_envs)
    slots = config.buffer_size // config.num_envs  # time slots: a transition of every environment
    buffer = buffers.flat(slots * local_envs)  # this rank's environments' transitions
    batch_size = config.batch_size
    rows_each, rows_extra = divmod(batch_size, config.num_envs)

    def first_row(env: int) -> int:
        """The first batch row of environment ``env`` (blocks of ``rows_each``, the first
        ``rows_extra`` one row longer)."""
        return env * rows_each + min(env, rows_extra)

    my_rows = range(first_row(my_envs.start), first_row(my_envs.stop))  # this rank's batch rows
    share = len(my_rows) / batch_size  # of the batch's mean: the ranks' shares sum to it
    target_entropy = L.sac_target_entropy(setup.action_dim)
    n = config.steps_per_update
    warmup = warmup_updates(config.learning_starts, n)

    def optimizer(lr: float | torch.Tensor) -> optim.Optimizer:
        return optim.inject_hyperparams(optim.adam)(learning_rate=lr)

    # The temperature steps with the critics' rate (CleanRL's q_lr). Their updates read the rates
    # from the optimiser states.
    actor_tx, critic_tx = optimizer(config.policy_lr), optimizer(config.q_lr)

    def init(key: torch.Tensor, **hparam_overrides: Any) -> SACTrainState:
        values = sweepable_values(config, hparam_overrides, SWEEPABLE)
        key_actor, key_critic, key_env = random.split(key, 3)
        actor_params, critic_params = init_actor_and_twin_critics(
            actor, critic, key_actor, key_critic, device
        )
        obs, env_state = setup.env.reset(key_env.to(device), setup.env_params)
        # log in float64, then rounded: the float32 value math.log(alpha) gives
        log_alpha = torch.as_tensor(values["alpha"], dtype=torch.float64).log().to(device, torch.float32)
        return SACTrainState(
            params={"actor": actor_params, "critic": critic_params},
            target_critic=ftree.map(torch.clone, critic_params),
            actor_opt=optimizer(values["policy_lr"]).init(actor_params),
            critic_opt=optimizer(values["q_lr"]).init(critic_params),
            log_alpha=log_alpha,
            alpha_opt=optimizer(values["q_lr"]).init(log_alpha),
            buffer=buffer.init(replay_example(obs, torch.zeros(setup.action_dim, device=device))),
            env_state=env_state,
            obs=obs,
            update_count=torch.zeros((), dtype=torch.int64, device=device),
            hparams=float32_tensors(SACHyperParams, values, device),
        )

    def sample_my_rows(buffer_state: buffers.FlatState, key: torch.Tensor) -> dict[str, torch.Tensor]:
        """This rank's rows of a batch drawn with ``key`` (leaves ``[len(my_rows), ...]``).

        Row ``i`` draws a time slot of its environment ``e`` uniformly (element ``i`` of one draw
        for the whole batch, so it depends on ``key`` and ``i`` only); that transition is row
        ``slot * local_envs + e_local`` of this rank's buffer, as it is row ``slot * num_envs + e``
        in one process holding every environment.
        """
        filled = torch.clamp(buffer_state.count // local_envs, min=1, max=slots)
        slot = random.randint(key, (batch_size,), 0, filled)[my_rows.start : my_rows.stop]
        row = torch.arange(my_rows.start, my_rows.stop, device=slot.device)
        long_rows = rows_extra * (rows_each + 1)  # the rows of the environments with one more
        env = torch.where(
            row < long_rows,
            row // (rows_each + 1),
            rows_extra + (row - long_rows) // max(rows_each, 1),
        )
        return gather(buffer_state.experience, slot * local_envs + (env - my_envs.start))

    tanh_normal = nets.distributions.tanh_normal

    def sample_rows(
        actor: torch.nn.Module, actor_params: dict[str, torch.Tensor], obs: torch.Tensor, key: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(a, log π(a|s))`` of this rank's rows ``obs`` (``[rows, A]``, ``[rows]``): the noise
        of the whole batch is one draw with ``key``, of which the rank takes its rows, so a rank
        draws its rows of one process's batch."""
        loc, scale = nets.apply(actor, actor_params, obs)
        noise = tanh_normal.noise(key, (batch_size, setup.action_dim), loc.dtype)
        return tanh_normal.sample_and_log_prob_from_noise(noise[my_rows.start : my_rows.stop], loc, scale)

    def critic_share(
        critic_params: dict[str, torch.Tensor],
        actor_params: dict[str, torch.Tensor],
        target_critic: dict[str, torch.Tensor],
        alpha: torch.Tensor,
        batch: dict[str, torch.Tensor],
        key: torch.Tensor,
        gamma: torch.Tensor,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """:func:`funrl.losses.sac_critic_objective` of this rank's rows, its policy draw
        :func:`sample_rows`, scaled to its share of the batch's mean loss."""
        loss, metrics = L.sac_critic_objective(
            critic_params, actor_params, target_critic, alpha, batch, key,
            actor=actor, critic=critic, gamma=gamma, sample=sample_rows,
        )  # fmt: skip
        return loss * share, metrics

    def actor_share(
        actor_params: dict[str, torch.Tensor],
        critic_params: dict[str, torch.Tensor],
        alpha: torch.Tensor,
        batch: dict[str, torch.Tensor],
        key: torch.Tensor,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """:func:`funrl.losses.sac_actor_objective` of this rank's rows (:func:`sample_rows`), as
        its share of the batch's mean loss; ``metrics["log_prob"]`` feeds the temperature."""
        loss, metrics = L.sac_actor_objective(
            actor_params, critic_params, alpha, batch, key, actor=actor, critic=critic, sample=sample_rows
        )
        return loss * share, metrics

    def temperature_share(log_alpha: torch.Tensor, log_prob: torch.Tensor) -> Any:
        """The temperature loss of this rank's rows, as its share of the batch's mean."""
        loss, metrics = L.sac_temperature_loss(log_alpha, log_prob, target_entropy)
        return loss * share, metrics

    critic_grad = torch.func.grad_and_value(critic_share, has_aux=True)
    actor_grad = torch.func.grad_and_value(actor_share, has_aux=True)
    alpha_grad = torch.func.grad_and_value(temperature_share, has_aux=True)

    def update(state: SACTrainState, key: torch.Tensor) -> tuple[SACTrainState, dict[str, torch.Tensor]]:
        key_rollout, step_keys = update_keys(key, config.gradient_steps, keys_per_step=3)
        warming_up = state.update_count * n < config.learning_starts
        actor_params = state.params["actor"]
        hp = state.hparams

        def policy(k: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
            loc, scale = nets.apply(actor, actor_params, obs)
            # Drawn for all environments, of which this rank keeps its rows: each row's sample
            # depends on its own row and the key only, as in one process.
            loc, scale = dp.at_all_rows((loc.detach(), scale.detach()), config.num_envs)
            sampled = nets.distributions.tanh_normal.sample(k, loc, scale)
            uniform = random.uniform(random.fold_in(k, 1), tuple(sampled.shape), minval=-1.0, maxval=1.0)
            return dp.my_rows(torch.where(warming_up, uniform, sampled))

        rollout_state, transitions, episode = collect(
            setup, policy, key_rollout, state.obs, state.env_state, config.num_steps, dp
        )
        buffer_state = buffer.add(state.buffer, transitions)
        learning = state.update_count >= warmup

        def gradient_step(carry, three_keys):
            params, target_critic, actor_opt, critic_opt, log_alpha, alpha_opt = carry
            key_sample, key_critic, key_actor = three_keys
            batch = sample_my_rows(buffer_state, key_sample)
            alpha = log_alpha.exp().detach()
            critic_grads, (critic_loss, critic_metrics) = critic_grad(
                params["critic"], params["actor"], target_critic, alpha, batch, key_critic, hp.gamma
            )
            # Each rank's shares of the batch means; their sum is the mean over the whole batch.
            critic_grads, critic_loss, q_mean = dp.sum_tree(
                (critic_grads, critic_loss, critic_metrics["q_mean"] * share)
            )
            updates, new_critic_opt = critic_tx.update(critic_grads, critic_opt, params["critic"])
            new_critic = optim.apply_updates(params["critic"], updates)
            actor_grads, (actor_loss, actor_metrics) = actor_grad(
                params["actor"], new_critic, alpha, batch, key_actor
            )
            actor_grads, actor_loss, entropy = dp.sum_tree(
                (actor_grads, actor_loss, actor_metrics["entropy"] * share)
            )
            updates, new_actor_opt = actor_tx.update(actor_grads, actor_opt, params["actor"])
            new_actor = optim.apply_updates(params["actor"], updates)
            if config.autotune:
                alpha_g, (alpha_loss, _) = alpha_grad(log_alpha, actor_metrics["log_prob"])
                alpha_g, alpha_loss = dp.sum_tree((alpha_g, alpha_loss))
                update_alpha, new_alpha_opt = critic_tx.update(alpha_g, alpha_opt, log_alpha)
                new_log_alpha = optim.apply_updates(log_alpha, update_alpha)
            else:
                alpha_loss, new_alpha_opt, new_log_alpha = torch.zeros_like(log_alpha), alpha_opt, log_alpha
            new_target = L.polyak(target_critic, new_critic, hp.tau)
            new = ({"actor": new_actor, "critic": new_critic}, new_target, new_actor_opt, new_critic_opt)
            new = (*new, new_log_alpha, new_alpha_opt)
            metrics = {
                "critic_loss": critic_loss,
                "actor_loss": actor_loss,
                "alpha_loss": alpha_loss,
                "alpha": alpha,
                "q_mean": q_mean,
                "entropy": entropy,
                "grad_norm": optim.global_norm(critic_grads),
            }
            return new, metrics

        carry = (
            state.params,
            state.target_critic,
            state.actor_opt,
            state.critic_opt,
            state.log_alpha,
            state.alpha_opt,
        )
        carry, metrics = gradient_phase(
            learning, gradient_step, carry, step_keys, METRICS,
            waiting_metrics=lambda _: {"alpha": state.log_alpha.exp()},  # the carry is kept while waiting
        )  # fmt: skip
        params, target_critic, actor_opt, critic_opt, log_alpha, alpha_opt = carry
        metrics.update(episode)
        new_state = SACTrainState(
            params=params,
            target_critic=target_critic,
            actor_opt=actor_opt,
            critic_opt=critic_opt,
            log_alpha=log_alpha,
            alpha_opt=alpha_opt,
            buffer=buffer_state,
            env_state=rollout_state.env_state,
            obs=rollout_state.obs,
            update_count=state.update_count + 1,
            hparams=hp,
        )
        return new_state, metrics

    def greedy_action(params: dict[str, Any], obs: torch.Tensor) -> torch.Tensor:
        loc, _ = nets.apply(actor, params["actor"], obs)
        return setup.to_env(torch.tanh(loc))

    return Agent(
        name=NAME,
        config=config,
        init=init,
        update=update,
        num_updates=config.num_updates,
        steps_per_update=n,
        greedy_action=greedy_action,
        env=setup.env,
        env_params=setup.env_params,
        device=device,
        # A rank's step holds its collectives and its share of the environments.
        static_key=(*static_key(NAME, config, SWEEPABLE, env, device), dp.rank, dp.world_size),
        warmup_updates=warmup,
    )


register_agent(
    NAME,
    SACConfig,
    make_train,
    summary="SAC with a learned temperature, continuous actions",
    action_spaces=("continuous",),
    learning_rates=("policy_lr", "q_lr"),
)
