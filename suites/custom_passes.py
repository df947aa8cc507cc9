"""Inductor's custom-pass hooks, and the wrapper the suites install a pass with (re-exported by suites/harness.py)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import torch

CUSTOM_PASS_HOOKS = (
    "pre_grad_custom_pass",
    "joint_custom_pre_pass",
    "joint_custom_post_pass",
    "post_grad_custom_pre_pass",
    "post_grad_custom_post_pass",
)


# The bisector's subsystem each hook's passes belong to: torch applies the custom hooks without one (so its
# CompilerBisector cannot turn them off), and a pass installed with `hook=` asks it as inductor's own passes do.
HOOK_SUBSYSTEM = {
    "pre_grad_custom_pass": "pre_grad_passes",
    "joint_custom_pre_pass": "joint_graph_passes",
    "joint_custom_post_pass": "joint_graph_passes",
    "post_grad_custom_pre_pass": "post_grad_passes",
    "post_grad_custom_post_pass": "post_grad_passes",
}


def custom_graph_pass(fn: Callable[[torch.fx.Graph], None], uuid: Any, hook: str | None = None) -> Any:
    """Wrap ``fn(graph)`` as inductor's ``CustomGraphPass`` whose ``uuid()`` keys the FX graph cache (``None``
    bypasses the cache, so the pass really runs on every compile). With ``hook``, torch's CompilerBisector can
    turn the pass off as one application of that hook's subsystem, named by the hook."""
    from . import harness

    base = harness._private("torch._inductor.custom_graph_pass", "CustomGraphPass")
    subsystem = HOOK_SUBSYSTEM.get(hook or "")

    class _FunctionPass(base):  # type: ignore[misc, valid-type]
        def __call__(self, graph: torch.fx.Graph) -> None:
            if subsystem is not None and _bisector_disables(subsystem, str(hook)):
                return
            fn(graph)

        def uuid(self) -> Any:
            return uuid

    _FunctionPass.__qualname__ = f"custom_graph_pass[{getattr(fn, '__name__', type(fn).__name__)}]"
    return _FunctionPass()


def _bisector_disables(subsystem: str, name: str) -> bool:
    try:
        bisector = importlib.import_module("torch._inductor.compiler_bisector").CompilerBisector
    except (ImportError, AttributeError):
        return False
    return bool(bisector.disable_subsystem("inductor", subsystem, lambda: name))


def is_custom_graph_pass(candidate: Any) -> bool:
    """Whether ``candidate`` already implements inductor's ``CustomGraphPass`` (and so names its own uuid)."""
    try:
        base = importlib.import_module("torch._inductor.custom_graph_pass").CustomGraphPass
    except (ImportError, AttributeError):
        return False
    return isinstance(candidate, base)
