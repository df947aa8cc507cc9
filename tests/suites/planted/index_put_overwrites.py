"""Planted bug: an accumulating index_put (what index_add, embedding backward and scatter-style sums become)
overwrites instead, so with duplicate indices the last write wins; with unique indices nothing changes."""

from __future__ import annotations

import pytest

from .breadth_graph_rewrite import after_post_grad_passes


def _overwrite(graph: object) -> None:
    import torch

    aten = torch.ops.aten
    for node in graph.nodes:  # type: ignore[attr-defined]
        if node.op == "call_function" and node.target in (aten.index_put.default, aten.index_put_.default):
            if len(node.args) > 3 and node.args[3]:
                node.args = (*node.args[:3], False, *node.args[4:])
            elif node.kwargs.get("accumulate"):
                node.kwargs = {**node.kwargs, "accumulate": False}


def pytest_configure(config: pytest.Config) -> None:
    after_post_grad_passes(_overwrite)
