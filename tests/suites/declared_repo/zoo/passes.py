"""The repository's inductor graph passes."""

from __future__ import annotations

import torch
from torch._inductor import pattern_matcher as pm

_PATTERNS = pm.PatternMatcherPass()
_registered = False
LINEAR_CALLS: list[int] = []


def _doubled(x: torch.Tensor) -> torch.Tensor:
    return torch.add(x, x)


def _scaled(x: torch.Tensor) -> torch.Tensor:
    return torch.mul(x, 2)


def double_add_to_mul(graph: torch.fx.Graph) -> None:
    """Post-grad: ``x + x`` becomes ``x * 2`` (one read of x instead of two), through inductor's pattern matcher."""
    global _registered
    if not _registered:
        pm.register_replacement(_doubled, _scaled, [torch.empty(8)], pm.fwd_only, _PATTERNS)
        _registered = True
    _PATTERNS.apply(graph)


def count_linear_layers(graph: torch.fx.Graph) -> None:
    """Pre-grad: an analysis pass that rewrites nothing (numerics must stay eager's)."""
    LINEAR_CALLS.append(sum(1 for node in graph.nodes if "linear" in str(node.target)))
