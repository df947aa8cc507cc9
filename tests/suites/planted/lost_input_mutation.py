"""Planted bug: AOT autograd drops the copy of a mutated input's new value back into the caller's tensor, both the
copy_ it puts inside the graph (inference) and the one its runtime epilogue performs (training)."""

from __future__ import annotations

from typing import Any

import pytest

from . import disable_compile_caches


def pytest_configure(config: pytest.Config) -> None:
    import importlib

    import torch._dynamo  # noqa: F401 - AOT autograd's modules import each other circularly unless dynamo loads first
    from torch._functorch._aot_autograd import graph_capture_wrappers, runtime_wrappers

    disable_compile_caches()

    def skip_in_graph_copy(*args: Any, **kwargs: Any) -> None:
        return None

    graph_capture_wrappers.apply_in_graph_mutations = skip_in_graph_copy
    # The training path's epilogue: where this torch has it (older releases write it elsewhere; the inference path
    # above, the one the bisection tests use, is in every release these plants target).
    epilogue = getattr(runtime_wrappers, "_RuntimeForwardEpilogue", None)
    if epilogue is not None:
        epilogue._apply_input_mutations = lambda self, orig, updated: None
    try:
        subclass_codegen = importlib.import_module("torch._functorch._aot_autograd.subclass_codegen")
    except ImportError:
        return
    original_exec = subclass_codegen._compile_and_exec_source

    def exec_without_mutation_epilogue(source: str, globals_dict: Any, fn_name: str, *args: Any, **kwargs: Any) -> Any:
        if fn_name == "_apply_mutations":
            return lambda orig_inputs, updated_inputs: None
        return original_exec(source, globals_dict, fn_name, *args, **kwargs)

    subclass_codegen._compile_and_exec_source = exec_without_mutation_epilogue
