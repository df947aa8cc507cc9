"""Planted bugs: pytest plugins loaded into a suite run (``-p tests.suites.planted.<name>``) that break torch the
way a faulty compiler fork or a regression would, to prove the suites catch it."""

from __future__ import annotations


def disable_compile_caches() -> None:
    """A broken compiler never shares cache entries with a clean one (torch's version is part of every key); here
    the two share a cache directory, so switch the graph caches off to make every graph go through the plant."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    inductor_config.fx_graph_cache = False
    functorch_config.enable_autograd_cache = False
