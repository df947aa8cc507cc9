"""Shared by the breadth plants (issue 20): run inductor's own post-grad passes, then a rewrite of the graph, on
every graph it compiles, with the graph caches off so no clean cache entry hides the rewrite."""

from __future__ import annotations

from collections.abc import Callable

import torch

from . import disable_compile_caches


def after_post_grad_passes(rewrite: Callable[[torch.fx.Graph], None]) -> None:
    import torch._inductor.compile_fx as compile_fx

    disable_compile_caches()
    original = compile_fx.post_grad_passes

    def post_grad_passes_then_rewrite(gm: torch.fx.GraphModule, *args: object, **kwargs: object) -> None:
        original(gm, *args, **kwargs)
        rewrite(gm.graph)
        gm.recompile()

    compile_fx.post_grad_passes = post_grad_passes_then_rewrite
