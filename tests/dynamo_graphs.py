"""``traced_graphs``: the FX graphs dynamo traces for a function (tracing only, no inductor).

A plain module (imported like ``point_env``) shared by tests that count what dynamo traced.
"""

from __future__ import annotations

from typing import Any

import torch


def traced_graphs(fn: Any, *args: Any) -> list[torch.fx.GraphModule]:
    """Reset dynamo, compile ``fn`` with a capturing backend (fullgraph) and call it on ``args``."""
    graphs: list[torch.fx.GraphModule] = []

    def capture(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(fn, backend=capture, fullgraph=True)(*args)
    return graphs
