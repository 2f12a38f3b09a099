"""Command line: ``python -m funrl demo`` (and, with the agents, ``train`` / ``eval``)."""

from __future__ import annotations

import argparse
import sys
import time


def _demo(args: argparse.Namespace) -> int:
    import torch

    from funrl import random

    key = random.key(args.seed)
    keys = random.split(key, 4)
    t0 = time.perf_counter()
    samples = torch.func.vmap(lambda k: random.uniform(k, (1000,)))(keys)
    elapsed = time.perf_counter() - t0
    print(f"funrl demo: seed {args.seed}")
    print(f"  split(key, 4)[0] = {[hex(int(w)) for w in keys[0]]}")
    print(f"  4 x 1000 uniforms in {elapsed * 1e3:.2f} ms, mean {samples.mean().item():.4f}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="funrl", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="sample keys and run a small network forward")
    demo.add_argument("--seed", type=int, default=0, help="PRNG seed (default: 0)")
    demo.set_defaults(func=_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
