"""Planted bug (pytest plugin): inductor's generated code reads a buffer before assigning it.

Load with ``-p tests.suites.planted.generated_code_unbound_local``. The same kind of failure as the upstream inductor
bug a real model hit on CPU (issue 31: `UnboundLocalError` on a buffer in generated code): every graph's wrapper gets,
at the top of its `call`, a read of a local that is only assigned on a branch never taken, in every graph that
calls a convolution (so torch's own compiled helpers, such as the minifier's, still run). The module still loads,
the crash happens when the compiled graph runs, inside the generated file.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from . import disable_compile_caches

_CALL = re.compile(r"^(?P<indent>[ \t]*)def call\((self, )?args\):\n", re.MULTILINE)


def _plant(code: str) -> str:
    match = _CALL.search(code)
    if match is None or "convolution" not in code:
        return code
    body = match.group("indent") + "    "
    planted = f"{body}if args is None:\n{body}    buf_planted = None\n{body}del buf_planted\n"
    return code[: match.end()] + planted + code[match.end():]


def pytest_configure(config: pytest.Config) -> None:
    from torch._inductor.graph import GraphLowering

    disable_compile_caches()
    original = GraphLowering._compile_to_module_lines

    def compile_with_plant(self: Any, wrapper_code: Any) -> Any:
        wrapper_code.value = _plant(wrapper_code.value)
        return original(self, wrapper_code)

    GraphLowering._compile_to_module_lines = compile_with_plant
