"""Count what ``torch.compile`` traces (tracing only, no inductor).

A plain module (imported like ``point_env``) shared by tests that count compiled graphs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def capturing_compile(fn: Callable[..., Any]) -> tuple[Callable[..., Any], list[torch.fx.GraphModule]]:
    """``torch.compile(fn, fullgraph=True)`` with a backend that records every graph it is handed.

    The list grows by one per compilation, so a recompile shows as a second graph; the graphs
    run as traced, without inductor, which keeps the tests cheap.
    """
    graphs: list[torch.fx.GraphModule] = []

    def capture(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        graphs.append(gm)
        return gm.forward

    return torch.compile(fn, backend=capture, fullgraph=True), graphs


def traced_graphs(fn: Callable[..., Any], *args: Any) -> list[torch.fx.GraphModule]:
    """Reset torch.compile's caches, compile ``fn`` with a capturing backend and call it on ``args``."""
    torch.compiler.reset()
    compiled, graphs = capturing_compile(fn)
    compiled(*args)
    return graphs
