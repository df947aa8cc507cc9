"""The private torch APIs of the distributed suite (DDPOptimizer's switch, FSDP2 before it was public), each wrapped
like ``harness.py``'s: a torch without one skips the test that needs it, naming what it lacks.

A sibling of ``harness.py`` (which would pass 300 lines with these); the suite reaches dynamo's counters, compile
counters and fresh compile state through ``harness`` itself.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from suites import harness

# Where fully_shard lives: public from torch 2.6, the composable API's private home before that (2.4, 2.5).
_FULLY_SHARD_HOMES = ("torch.distributed.fsdp", "torch.distributed._composable.fsdp")


def fully_shard() -> Callable[..., Any]:
    """FSDP2's ``fully_shard``, wherever this torch keeps it."""
    for module in _FULLY_SHARD_HOMES:
        try:
            return importlib.import_module(module).fully_shard
        except (ImportError, AttributeError):
            continue
    pytest.skip(f"torch {torch.__version__} has no FSDP2 fully_shard (looked in {', '.join(_FULLY_SHARD_HOMES)})")


@contextlib.contextmanager
def optimize_ddp(enabled: bool) -> Iterator[None]:
    """``torch._dynamo.config.optimize_ddp`` for the body: True splits a DDP module's graph at its gradient buckets
    (DDPOptimizer), so each bucket's all-reduce can start while the rest of the backward runs; False compiles one
    graph and lets DDP's reducer fire its hooks after it."""
    config = harness._private("torch._dynamo", "config")
    if not hasattr(config, "optimize_ddp"):
        pytest.skip(f"torch {torch.__version__} lacks torch._dynamo.config.optimize_ddp")
    with config.patch(optimize_ddp=enabled):
        yield


def compiled_graph_counter() -> Any:
    """A backend that counts the graphs it is handed (``.frame_count``: DDPOptimizer's per-bucket pieces each count)
    and compiles each with inductor."""
    return harness.compile_counter("inductor")
