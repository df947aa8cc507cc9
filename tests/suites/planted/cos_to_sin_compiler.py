"""Planted bug: inductor's post-grad passes turn every cosine into a sine, on every graph it compiles."""

from __future__ import annotations

import pytest

from . import disable_compile_caches


def pytest_configure(config: pytest.Config) -> None:
    import torch
    import torch._inductor.compile_fx as compile_fx

    disable_compile_caches()
    original = compile_fx.post_grad_passes

    def post_grad_passes_then_cos_to_sin(gm: torch.fx.GraphModule, *args: object, **kwargs: object) -> None:
        original(gm, *args, **kwargs)
        for node in gm.graph.nodes:
            if node.op == "call_function" and node.target is torch.ops.aten.cos.default:
                node.target = torch.ops.aten.sin.default
        gm.recompile()

    compile_fx.post_grad_passes = post_grad_passes_then_cos_to_sin
