"""One full SAC update step: funrl (eager and torch.compile) vs TorchRL's SACLoss + torch.optim.

Both sides do the same work per step on the same batch (256 transitions, obs 17, action 6, as
HalfCheetah): a tanh-Gaussian actor and twin Q critics, each an MLP with two hidden layers of
256; the critic target with the target critics and a fresh next-action sample; the critic,
actor and temperature (log-alpha, target entropy -6) losses and their gradients; three Adam steps
(lr 3e-4); and a Polyak update of the target critics (tau 0.005).

- funrl: the twin critics are stacked params evaluated with one ``vmap``; the step is a pure
  function ``(state, batch, key) -> (state, losses)`` built from ``sac_critic_objective``,
  ``sac_actor_objective``, ``sac_temperature_loss``, ``funrl.optim.adam`` and ``polyak``. As in
  CleanRL, the actor step uses the critics just updated; ``torch.compile`` makes it one graph.
- TorchRL: ``SACLoss`` (its twin critics are also vmapped), one forward of the three losses, one
  backward, ``torch.optim.Adam`` steps for the three parameter groups, ``SoftUpdate``.

Each figure is the median over ``--repeats`` timings of ``--steps`` consecutive steps, variants
taken round-robin so that load from other processes on a shared machine falls on all alike.

    python benchmarks/sac_update.py --device cpu
    python benchmarks/sac_update.py --device cuda --mode reduce-overhead   # CUDA graphs
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import nn

from funrl import nets, optim, random, tree
from funrl.losses import polyak, sac_actor_objective, sac_critic_objective, sac_temperature_loss

OBS_DIM, ACT_DIM, HIDDEN, BATCH = 17, 6, (256, 256), 256
LR, TAU, GAMMA = 3e-4, 0.005, 0.99
TARGET_ENTROPY = -float(ACT_DIM)


class SACState(NamedTuple):
    actor_params: dict
    critic_params: dict
    target_critic_params: dict
    log_alpha: torch.Tensor
    actor_opt: tuple
    critic_opt: tuple
    alpha_opt: tuple


def make_batch(device: torch.device, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    batch = {
        "obs": torch.randn(BATCH, OBS_DIM, generator=g),
        "action": torch.rand(BATCH, ACT_DIM, generator=g) * 2 - 1,
        "reward": torch.randn(BATCH, generator=g),
        "next_obs": torch.randn(BATCH, OBS_DIM, generator=g),
        "terminated": torch.rand(BATCH, generator=g) < 0.01,
    }
    return {k: v.to(device) for k, v in batch.items()}


# ------------------------------------------------------------------------------------------------
# funrl


def make_funrl(device: torch.device):
    actor = nets.GaussianActor(OBS_DIM, ACT_DIM, HIDDEN, "relu", state_dependent_std=True)
    critic = nets.ContinuousQ(OBS_DIM, ACT_DIM, HIDDEN)
    actor_key, critic_key = random.split(random.key(0).to(device))
    actor_params = nets.init(actor, actor_key)
    critic_params = nets.init_ensemble(critic, critic_key, 2)
    log_alpha = torch.zeros((), device=device)
    actor_optim, critic_optim, alpha_optim = optim.adam(LR), optim.adam(LR), optim.adam(LR)
    state = SACState(
        actor_params,
        critic_params,
        tree.map(torch.clone, critic_params),
        log_alpha,
        actor_optim.init(actor_params),
        critic_optim.init(critic_params),
        alpha_optim.init(log_alpha),
    )

    def step(state: SACState, batch: dict, key: torch.Tensor) -> tuple[SACState, torch.Tensor]:
        critic_key, actor_key = random.split(key)
        alpha = state.log_alpha.exp().detach()
        critic_grads, (critic_loss, _) = torch.func.grad_and_value(sac_critic_objective, has_aux=True)(
            state.critic_params,
            state.actor_params,
            state.target_critic_params,
            alpha,
            batch,
            critic_key,
            actor=actor,
            critic=critic,
            gamma=GAMMA,
        )
        updates, critic_opt = critic_optim.update(critic_grads, state.critic_opt, state.critic_params)
        critic_params = optim.apply_updates(state.critic_params, updates)
        actor_grads, (actor_loss, metrics) = torch.func.grad_and_value(sac_actor_objective, has_aux=True)(
            state.actor_params, critic_params, alpha, batch, actor_key, actor=actor, critic=critic
        )
        updates, actor_opt = actor_optim.update(actor_grads, state.actor_opt, state.actor_params)
        actor_params = optim.apply_updates(state.actor_params, updates)
        alpha_grad, (alpha_loss, _) = torch.func.grad_and_value(sac_temperature_loss, has_aux=True)(
            state.log_alpha, metrics["log_prob"], TARGET_ENTROPY
        )
        updates, alpha_opt = alpha_optim.update(alpha_grad, state.alpha_opt, state.log_alpha)
        log_alpha = optim.apply_updates(state.log_alpha, updates)
        target_critic_params = polyak(state.target_critic_params, critic_params, TAU)
        new_state = SACState(
            actor_params, critic_params, target_critic_params, log_alpha, actor_opt, critic_opt, alpha_opt
        )
        return new_state, torch.stack([critic_loss, actor_loss, alpha_loss])

    return state, step


# ------------------------------------------------------------------------------------------------
# TorchRL


def make_torchrl(device: torch.device):
    from tensordict import TensorDict
    from tensordict.nn import TensorDictModule
    from torchrl.modules import ProbabilisticActor, TanhNormal, ValueOperator
    from torchrl.objectives import SACLoss, SoftUpdate

    class QOut(nn.Module):
        """funrl's critic class as a real module with a ``[B, 1]`` output, as TorchRL expects."""

        def __init__(self):
            super().__init__()
            self.q = nets.ContinuousQ(OBS_DIM, ACT_DIM, HIDDEN, device=device)

        def forward(self, obs, action):
            return self.q(obs, action).unsqueeze(-1)

    torch.manual_seed(0)
    actor_module = nets.GaussianActor(
        OBS_DIM, ACT_DIM, HIDDEN, "relu", state_dependent_std=True, device=device
    )
    actor = ProbabilisticActor(
        TensorDictModule(actor_module, in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
        return_log_prob=True,
    )
    qvalue = ValueOperator(QOut(), in_keys=["observation", "action"])
    loss = SACLoss(
        actor,
        qvalue,
        num_qvalue_nets=2,
        loss_function="l2",
        alpha_init=1.0,
        target_entropy=TARGET_ENTROPY,
    )
    loss.make_value_estimator(gamma=GAMMA)
    loss = loss.to(device)
    updater = SoftUpdate(loss, tau=TAU)
    actor_opt = torch.optim.Adam(loss.actor_network_params.values(True, True), lr=LR)
    critic_opt = torch.optim.Adam(loss.qvalue_network_params.values(True, True), lr=LR)
    alpha_opt = torch.optim.Adam([loss.log_alpha], lr=LR)

    def make_td(batch: dict) -> TensorDict:
        return TensorDict(
            {
                "observation": batch["obs"],
                "action": batch["action"],
                ("next", "observation"): batch["next_obs"],
                ("next", "reward"): batch["reward"].unsqueeze(-1),
                ("next", "terminated"): batch["terminated"].unsqueeze(-1),
                ("next", "done"): batch["terminated"].unsqueeze(-1),
            },
            [BATCH],
            device=device,
        )

    def step(td: TensorDict) -> torch.Tensor:
        out = loss(td)
        total = out["loss_qvalue"] + out["loss_actor"] + out["loss_alpha"]
        for opt in (actor_opt, critic_opt, alpha_opt):
            opt.zero_grad(set_to_none=True)
        total.backward()
        for opt in (actor_opt, critic_opt, alpha_opt):
            opt.step()
        updater.step()
        return total.detach()

    return make_td, step


# ------------------------------------------------------------------------------------------------


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=20, help="steps per timing")
    parser.add_argument("--repeats", type=int, default=7, help="timings per variant (median reported)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument(
        "--mode",
        default="default",
        help="torch.compile mode for funrl (e.g. reduce-overhead for CUDA graphs)",
    )
    args = parser.parse_args()
    device = torch.device(args.device)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    batch = make_batch(device)

    state, funrl_step = make_funrl(device)
    compiled_step = torch.compile(funrl_step, mode=args.mode, fullgraph=True)
    keys = random.split(random.key(1).to(device), args.steps)
    make_td, torchrl_step = make_torchrl(device)
    td = make_td(batch)

    # Warm up (and compile) each variant; keep their own states so each trains its own agent.
    states = {"funrl eager": state, "funrl compiled": state}
    t0 = time.perf_counter()
    states["funrl compiled"], _ = compiled_step(state, batch, keys[0])
    sync(device)
    compile_s = time.perf_counter() - t0
    states["funrl eager"], _ = funrl_step(state, batch, keys[0])
    torchrl_step(td)
    sync(device)

    def run_funrl(name: str, fn: Callable) -> Callable[[], None]:
        def run() -> None:
            s = states[name]
            for i in range(args.steps):
                if args.mode == "reduce-overhead":
                    torch.compiler.cudagraph_mark_step_begin()
                s, _ = fn(s, batch, keys[i])
            states[name] = s

        return run

    def run_torchrl() -> None:
        for _ in range(args.steps):
            torchrl_step(td)

    runs = {
        "funrl eager": run_funrl("funrl eager", funrl_step),
        "funrl compiled": run_funrl("funrl compiled", compiled_step),
        "torchrl SACLoss + torch.optim (eager)": run_torchrl,
    }
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.repeats):
        for name, run in runs.items():
            sync(device)
            t0 = time.perf_counter()
            run()
            sync(device)
            times[name].append((time.perf_counter() - t0) / args.steps)

    medians = {name: statistics.median(ts) for name, ts in times.items()}
    peer = medians["torchrl SACLoss + torch.optim (eager)"]
    machine = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    print(
        f"SAC update step, batch {BATCH}, 2x256 MLPs, twin critics; device {device} ({machine}), "
        f"threads {torch.get_num_threads()}, torch {torch.__version__}, compile mode {args.mode}"
    )
    print(f"median of {args.repeats} x {args.steps} steps; funrl compile (first call) {compile_s:.1f} s")
    print("| variant | ms / update | updates / s | vs TorchRL |")
    print("|---|---|---|---|")
    for name, median in medians.items():
        print(f"| {name} | {median * 1e3:.2f} | {1.0 / median:.0f} | {peer / median:.2f}x |")


if __name__ == "__main__":
    main()
