"""funrl's command line.

funrl train ppo --env CartPole-v1 --total-steps 500000 --seeds 8 --device cpu --out runs/NAME
funrl train ppo --env gym:Acrobot-v1 --no-compile --out runs/NAME   (any gymnasium id, eagerly)
funrl train ppo --seeds 4 --sweep learning_rate=1e-3,3e-4 ...   (every point x every seed, one vmap)
funrl train --resume --out runs/NAME
torchrun --nproc-per-node P -m funrl train ppo --seeds 64 [--sweep ...] ...   (seeds, or points
    x seeds, sharded over P ranks)
torchrun --nproc-per-node P -m funrl train ppo --num-envs 64 --data-parallel ...   (envs over P ranks)
funrl eval runs/NAME --episodes 20 [--json]
funrl cache path|clear      (compiled update steps, kept between runs)
funrl demo
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value}")
    return value


def _sweep_axis(text: str) -> tuple[str, tuple[float, ...]]:
    """``NAME=V1,V2,...``: one axis of a sweep grid."""
    name, sep, values = text.partition("=")
    try:
        numbers = tuple(float(v) for v in values.split(","))
    except ValueError:
        numbers = ()
    if not sep or not name.isidentifier() or not numbers:
        raise argparse.ArgumentTypeError(
            f"expected NAME=V1,V2,... (e.g. learning_rate=1e-3,3e-4), got {text!r}"
        ) from None
    return name, numbers


def sweep_from_args(args: argparse.Namespace) -> dict[str, tuple[float, ...]] | None:
    """``--sweep`` options as ``train_run``'s ``sweep`` (None without one); a name given twice is an error."""
    if not args.sweep:
        return None
    sweep: dict[str, tuple[float, ...]] = {}
    for name, values in args.sweep:
        if name in sweep:
            from funrl.agents import run

            raise run.RunError(f"--sweep: {name} is given twice; expected each name once")
        sweep[name] = values
    return sweep


def _device(text: str) -> str:
    import torch

    try:
        device = torch.device(text)
    except RuntimeError:
        raise argparse.ArgumentTypeError(
            f"expected a torch device such as cpu or cuda, got {text!r}"
        ) from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise argparse.ArgumentTypeError("cuda was asked for but torch sees no CUDA device")
    return text


def _demo(args: argparse.Namespace) -> int:
    import torch

    from funrl import nets, random

    key = random.key(args.seed)
    k_init, k_data = random.split(key)
    module = nets.MLP(4, [64, 64], 2)
    params = nets.init(module, k_init)
    x = random.normal(k_data, (8, 4))
    t0 = time.perf_counter()
    ensemble = nets.init_ensemble(module, key, 10)
    logits = torch.func.vmap(nets.apply, in_dims=(None, 0, None))(module, ensemble, x)
    elapsed = time.perf_counter() - t0
    print(f"funrl demo: seed {args.seed}")
    print(f"  split(key)[0] = {[hex(int(w)) for w in random.split(key)[0]]}")
    print(f"  one MLP forward: logits {list(nets.apply(module, params, x).shape)}")
    print(f"  10-member ensemble via vmap: logits {list(logits.shape)} in {elapsed * 1e3:.1f} ms")
    return 0


def _check_gymnasium_args(args: argparse.Namespace) -> None:
    """``--env gym:ID``: a registered gymnasium id, trained eagerly (``--no-compile``), one seed.

    The Python API refuses to compile or vmap a host gymnasium env (``from_gymnasium``); the
    command line says so in its own option names before anything is built or written.
    """
    from funrl.agents import run

    run.check_gymnasium_id(args.env, arg="--env")
    if not args.no_compile:
        raise run.RunError(
            f"--no-compile: --env {args.env} is a host gymnasium env, which torch.compile cannot "
            "trace; add --no-compile to train it eagerly"
        )
    if args.sweep:
        raise run.RunError(
            f"--sweep: --env {args.env} is one set of host gymnasium envs, which cannot be vmapped "
            "over grid points; train each point as its own run"
        )
    if args.seeds != 1:
        raise run.RunError(
            f"--seeds: --env {args.env} is one set of host gymnasium envs, which cannot be vmapped "
            f"over seeds; expected --seeds 1, got {args.seeds} (train each seed as its own run with --seed)"
        )


OWN_OPTIONS = {"env_id": "--env", "total_steps": "--total-steps", "num_envs": "--num-envs"}
"""Config fields that ``train`` sets with an option of their own rather than ``--set``."""


def config_from_args(args: argparse.Namespace) -> tuple[str | None, object | None]:
    """``(algo, config)`` for ``train``'s options; ``(None, None)`` when resuming (the run's own)."""
    from funrl.agents import run

    if args.resume:
        if args.out is None:
            raise run.RunError("out: --resume needs --out, the folder of the run to continue")
        if args.set:
            raise run.RunError("--set: a resumed run continues with the config in its config.json")
        return None, None
    if args.algo is None:
        raise run.RunError("algo: expected an algorithm name (e.g. ppo) unless --resume is given")
    spec = run.agent_spec(args.algo)
    if run.gymnasium_id(args.env) is not None:
        _check_gymnasium_args(args)
    overrides = {"env_id": args.env, "total_steps": args.total_steps}
    if args.num_envs is not None:
        overrides["num_envs"] = args.num_envs
    if args.lr is not None:
        overrides.update(dict.fromkeys(spec.learning_rates, args.lr))
    fields = run.config_overrides(spec.config_type, args.set or ())
    given = dict(OWN_OPTIONS)
    if args.lr is not None:
        given.update(dict.fromkeys(spec.learning_rates, "--lr"))
    given.update(dict.fromkeys(sweep_from_args(args) or (), "--sweep"))
    clashes = sorted(fields.keys() & given.keys())
    if clashes:
        raise run.RunError(f"--set {clashes[0]}: {given[clashes[0]]} gives it; expected it once")
    return args.algo, spec.config_type(**overrides, **fields)


def _train(args: argparse.Namespace) -> int:
    import torch

    from funrl import control, distributed
    from funrl.agents import run

    algo, config = config_from_args(args)
    if not args.no_compile:
        control.use_persistent_cache()  # a second run of the same step loads it instead of compiling
    # gym:ID (and namespaced ids such as ALE/Pong-v5) would make a nested or colon-laden folder name.
    env_name = args.env.replace(":", "-").replace("/", "-")
    out = Path(args.out) if args.out else Path("runs") / f"{algo}-{env_name}-{time.strftime('%Y%m%d-%H%M%S')}"
    t0 = time.perf_counter()
    threads = torch.get_num_threads()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    # The CLI owns the process group (train_run then finds it up) so that rank 0 alone reports.
    with distributed.process_group(args.device, args.dist_timeout):
        try:
            run.train_run(
                algo,
                config,
                out,
                seed=args.seed,
                num_seeds=args.seeds,
                device=args.device,
                compile=not args.no_compile,
                resume=args.resume,
                checkpoint_every=args.checkpoint_every,
                progress=not args.no_progress,
                data_parallel=args.data_parallel,
                dist_timeout_s=args.dist_timeout,
                sweep=sweep_from_args(args),
            )
        finally:
            torch.set_num_threads(threads)  # main() may run inside a longer-lived process (a notebook, tests)
        if distributed.is_first():
            print(f"funrl: trained in {time.perf_counter() - t0:.1f} s; run folder {out}")
    return 0


def _cache(args: argparse.Namespace) -> int:
    import shutil

    from funrl import control

    folder = control.cache_dir()
    if args.action == "clear":
        shutil.rmtree(folder, ignore_errors=True)
        print(f"funrl: removed {folder}")
    else:
        print(folder)
    return 0


def _eval(args: argparse.Namespace) -> int:
    from funrl.agents import run

    result = run.evaluate_run(Path(args.run), episodes=args.episodes, device=args.device)
    if args.json:
        print(json.dumps(result))
    else:
        per_seed = ", ".join(f"{r:.1f}" for r in result["per_seed"])
        print(f"mean return {result['mean_return']:.2f} ± {result['std_return']:.2f} over seeds [{per_seed}]")
    return 0


def _sweepable(spec: object) -> tuple[str, ...]:
    """The sweepable names of an agent: its module's ``SWEEPABLE`` (every agent file defines one)."""
    import inspect

    return tuple(getattr(inspect.getmodule(spec.make_train), "SWEEPABLE", ()))


def build_parser() -> argparse.ArgumentParser:
    from funrl import distributed
    from funrl.agents import registered_agents

    parser = argparse.ArgumentParser(
        prog="funrl",
        description="funrl: pure-functional RL for PyTorch",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="sample keys and run a network and an ensemble forward")
    demo.add_argument("--seed", type=int, default=0, help="PRNG seed (default: 0)")
    demo.set_defaults(func=_demo)

    train = sub.add_parser(
        "train", help="train an agent; writes config, metrics, plot and checkpoints to --out"
    )
    train.add_argument(
        "algo",
        nargs="?",
        default=None,
        help="algorithm: "
        + "; ".join(f"{name} ({spec.summary})" for name, spec in registered_agents().items()),
    )
    train.add_argument(
        "--env",
        default="CartPole-v1",
        help="environment: an id from funrl.envs.registry() (compiled, vmapped over seeds), or "
        "gym:ID for a registered gymnasium env (e.g. gym:Acrobot-v1, gym:LunarLander-v3 where "
        "installed), run eagerly through funrl.envs.from_gymnasium: it needs --no-compile (an "
        "error otherwise), trains one seed (--seeds 1) and cannot be resumed, since the gymnasium "
        "envs' state is not in the checkpoint; the same --seed retrains it identically "
        "(default: CartPole-v1)",
    )
    train.add_argument(
        "--total-steps",
        type=_positive_int,
        default=500_000,
        help="environment steps per seed (default: 500000)",
    )
    train.add_argument(
        "--seeds", type=_positive_int, default=1, help="seeds trained at once with vmap (default: 1)"
    )
    train.add_argument(
        "--seed", type=int, default=0, help="base seed; seed i uses fold_in(key(seed), i) (default: 0)"
    )
    train.add_argument("--device", type=_device, default="cpu", help="torch device (default: cpu)")
    train.add_argument("--out", default=None, help="run folder (default: runs/ALGO-ENV-TIME)")
    train.add_argument(
        "--num-envs",
        type=_positive_int,
        default=None,
        help="parallel environments per seed (default: the algorithm's)",
    )
    train.add_argument(
        "--lr",
        type=_positive_float,
        default=None,
        help="learning rate, every one of the algorithm: "
        + "; ".join(f"{name}: {', '.join(spec.learning_rates)}" for name, spec in registered_agents().items())
        + " (default: the algorithm's)",
    )
    train.add_argument(
        "--set",
        nargs="+",
        action="extend",
        metavar="NAME=VALUE",
        help="any other field of the algorithm's config (e.g. --set update_epochs=10 "
        "hidden_sizes=[256,256] activation=relu, env_kwargs='{\"landmark_range\": 0.8}'): numbers, "
        "bools and lists as JSON, strings as they are; config.json records them",
    )
    train.add_argument(
        "--sweep",
        type=_sweep_axis,
        action="append",
        metavar="NAME=V1,V2,...",
        help="train every value of the float hyper-parameter NAME (one the algorithm's train state "
        "holds: "
        + "; ".join(f"{name}: {', '.join(_sweepable(spec))}" for name, spec in registered_agents().items())
        + ") with every seed, as one vmapped batch sharing one compiled step; repeat it for a "
        "grid of every combination; metrics.csv rows carry their grid point (config.json holds the grid)",
    )
    train.add_argument(
        "--checkpoint-every", type=_positive_int, default=50, help="updates between checkpoints (default: 50)"
    )
    train.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
    train.add_argument(
        "--no-compile",
        action="store_true",
        help="run the update step eagerly (no torch.compile; needed for --env gym:ID)",
    )
    train.add_argument(
        "--threads",
        type=_positive_int,
        default=None,
        help="torch's intra-op CPU threads for the run (torch.set_num_threads; default: torch's)",
    )
    train.add_argument(
        "--data-parallel",
        action="store_true",
        help="under torchrun, train one agent (one seed) whose --num-envs are spread over the ranks, "
        "gradients and normalisation statistics all-reduced in the update; without it torchrun "
        "shards --seeds over the ranks (see funrl.distributed)",
    )
    train.add_argument(
        "--dist-timeout",
        type=_positive_float,
        default=distributed.DEFAULT_TIMEOUT_S,
        help="under torchrun, seconds a rank waits for a live but silent rank before the run stops "
        f"with an error (a rank that dies is noticed at once; default: {distributed.DEFAULT_TIMEOUT_S:g})",
    )
    train.add_argument("--no-progress", action="store_true", help="no progress bar")
    train.set_defaults(func=_train)

    cache = sub.add_parser(
        "cache",
        help="where compiled update steps are kept ($FUNRL_CACHE_DIR, else ~/.cache/funrl); 'clear' removes them",
    )
    cache.add_argument("action", choices=("path", "clear"), help="print the folder, or remove it")
    cache.set_defaults(func=_cache)

    ev = sub.add_parser("eval", help="evaluate the final checkpoint of every seed of a run")
    ev.add_argument("run", help="the run folder given to train --out")
    ev.add_argument(
        "--episodes", type=_positive_int, default=20, help="greedy episodes per seed (default: 20)"
    )
    ev.add_argument("--device", type=_device, default=None, help="torch device (default: the run's)")
    ev.add_argument(
        "--json", action="store_true", help='print one JSON line {"mean_return", "std_return", "per_seed"}'
    )
    ev.set_defaults(func=_eval)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``funrl`` with the arguments ``argv``; returns the exit status.

    Bad options and unusable run folders exit 2, a training run stopped by a non-finite loss
    (:class:`funrl.agents.NonFiniteError`) or by a lost rank under torchrun exits 1; each prints
    one ``funrl CMD: error:`` line.
    """
    import torch.distributed as dist

    from funrl import distributed
    from funrl.agents import NonFiniteError

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, TypeError, NonFiniteError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"funrl {args.command}: error: {message}", file=sys.stderr)
        return 1 if isinstance(exc, NonFiniteError) else 2
    except distributed.RankStopped as exc:
        print(f"funrl {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except dist.DistError as exc:
        print(f"funrl {args.command}: error: {distributed.lost_rank_message(exc)}", file=sys.stderr)
        return 1


def cli() -> int:
    """The ``funrl`` command and ``python -m funrl``: :func:`main` on ``sys.argv``."""
    return main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(cli())
