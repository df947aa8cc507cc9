"""Planted bug: inductor's cumsum becomes an exclusive scan (each element's own value left out), floats and ints."""

from __future__ import annotations

import pytest

from .breadth_graph_rewrite import after_post_grad_passes


def _exclusive(graph: object) -> None:
    import torch

    aten = torch.ops.aten
    for node in list(graph.nodes):  # type: ignore[attr-defined]
        if node.op == "call_function" and node.target is aten.cumsum.default:
            with graph.inserting_after(node):  # type: ignore[attr-defined]
                shifted = graph.call_function(aten.sub.Tensor, (node, node.args[0]))  # type: ignore[attr-defined]
            # The value inductor's lowering reads for an output's strides (torch 2.11 fails the compile without it):
            # the same shape, dtype and strides as the scan's.
            if "val" in node.meta:
                shifted.meta["val"] = node.meta["val"]
            node.replace_all_uses_with(shifted, delete_user_cb=lambda user, new=shifted: user is not new)


def pytest_configure(config: pytest.Config) -> None:
    after_post_grad_passes(_exclusive)
