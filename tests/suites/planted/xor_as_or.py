"""Planted bug: inductor computes every bitwise xor as a bitwise or."""

from __future__ import annotations

import pytest

from .breadth_graph_rewrite import after_post_grad_passes


def _xor_as_or(graph: object) -> None:
    import torch

    aten = torch.ops.aten
    swap = {aten.bitwise_xor.Tensor: aten.bitwise_or.Tensor, aten.bitwise_xor.Scalar: aten.bitwise_or.Scalar}
    for node in graph.nodes:  # type: ignore[attr-defined]
        if node.op == "call_function" and node.target in swap:
            node.target = swap[node.target]


def pytest_configure(config: pytest.Config) -> None:
    after_post_grad_passes(_xor_as_or)
