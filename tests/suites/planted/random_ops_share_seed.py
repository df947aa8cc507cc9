"""Planted bug: every random op of a compiled graph looks up the same seed, so they all draw one stream."""

from __future__ import annotations

import pytest

from .breadth_graph_rewrite import after_post_grad_passes


def _one_seed(graph: object) -> None:
    import torch

    lookup = torch.ops.prims.inductor_lookup_seed.default
    for node in graph.nodes:  # type: ignore[attr-defined]
        if node.op == "call_function" and node.target is lookup:
            node.args = (node.args[0], 0)


def pytest_configure(config: pytest.Config) -> None:
    after_post_grad_passes(_one_seed)
