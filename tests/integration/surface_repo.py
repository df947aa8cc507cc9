"""The sample repository of tests/integration/test_cache_verdicts.py: its own package `compilerpatch` changes
inductor at run time in eight ways, each a no-op on the numbers, and `BROKEN` holds, per kind, the one file a pull
request edits to break it."""

from __future__ import annotations

import textwrap

CONFIG = '[suites]\nrun = ["repo"]\ndevices = ["cpu"]\nrepo_tests = ["tests"]\n'
# The repository's package: three run-time patches of inductor, each a no-op on the numbers.
LOWERING = '''
import torch
from torch._inductor.lowering import lowerings

_stock = lowerings[torch.ops.aten.sin.default]


def sin_lowering(x):
    return _stock(x)


lowerings[torch.ops.aten.sin.default] = sin_lowering
'''
DECOMPOSITION = '''
import torch
from torch._inductor.decomposition import decompositions


def sinh(x):
    return (x.exp() - (-x).exp()) * 0.5


decompositions[torch.ops.aten.sinh.default] = sinh
'''
CUSTOM_PASS = '''
import torch
from torch._inductor import config
from torch._inductor.custom_graph_pass import CustomGraphPass


class KeepAdds(CustomGraphPass):
    def __call__(self, graph):
        pass

    def uuid(self):
        return "keep-adds-v1"  # never bumped: torch's key cannot tell two versions apart


config.post_grad_custom_post_pass = KeepAdds()
'''
OVERRIDE = '''
from torch._inductor.codegen.cpp import CppOverrides, CppVecOverrides


def _keep(stock):
    def override(*args, **kwargs):
        return stock(*args, **kwargs)

    return staticmethod(override)


for _cls in (CppOverrides, CppVecOverrides):  # the C++ inductor writes for sin, scalar and vectorised
    _cls.sin = _keep(_cls.sin)
'''
# Issue 38: the same package rebinds, at import, what no table, config or override class holds.
FUNCTION = '''
import functools

from torch._inductor.codegen import cpp

_stock = cpp.value_to_cpp


@functools.wraps(_stock)
def value_to_cpp(value, cpp_type):  # every constant in the C++ inductor writes
    return _stock(value, cpp_type)


cpp.value_to_cpp = value_to_cpp
'''
METHOD = '''
import torch
from torch._inductor.graph import GraphLowering

_stock = GraphLowering.call_function


def call_function(self, target, args, kwargs):  # every op of every graph inductor lowers
    return _stock(self, target, args, kwargs)


GraphLowering.call_function = call_function
'''
CODE = '''
from torch._inductor import decomposition


def silu(x):  # inductor's own SiLU, as this stack keeps it
    return x / (1 + x.neg().exp())


decomposition.silu.__wrapped__.__code__ = silu.__code__
'''
CLOSURE = '''
import torch
from torch._inductor.lowering import lowerings

# By packet: the lowering of `sin.default` is this package's own (lowering.py); torch's is held under both keys.
_cells = {op: dict(zip(lowerings[op].__code__.co_freevars, lowerings[op].__closure__))
          for op in (torch.ops.aten.sin, torch.ops.aten.cos)}
_stock = _cells[torch.ops.aten.sin]["decomp_fn"].cell_contents


def decomp_fn(*args, **kwargs):  # what sin's lowering computes
    return _stock(*args, **kwargs)


_cells[torch.ops.aten.sin]["decomp_fn"].cell_contents = decomp_fn
'''
REBINDS = {"compilerpatch/function.py": FUNCTION, "compilerpatch/method.py": METHOD,
           "compilerpatch/code.py": CODE, "compilerpatch/closure.py": CLOSURE}
BROKEN_REBINDS = {
    "module function": ("compilerpatch/function.py", FUNCTION.replace(
        "return _stock(value, cpp_type)", "return _stock(value + 1 if isinstance(value, float) else value, cpp_type)")),
    "method": ("compilerpatch/method.py", METHOD.replace("    return _stock(", "    if target is torch.ops.aten.sin."
                                                         "default:\n        target = torch.ops.aten.cos.default\n"
                                                         "    return _stock(")),
    "__code__": ("compilerpatch/code.py", CODE.replace("x.neg().exp()", "x.exp()")),
    "closure cell": ("compilerpatch/closure.py", CLOSURE.replace(
        "_cells[torch.ops.aten.sin][\"decomp_fn\"].cell_contents = decomp_fn",
        "_cells[torch.ops.aten.sin][\"decomp_fn\"].cell_contents = _cells[torch.ops.aten.cos][\"decomp_fn\"]"
        ".cell_contents")),
}
BROKEN = {
    "lowering": ("compilerpatch/lowering.py", LOWERING.replace("sin.default]\n\n\ndef", "cos.default]\n\n\ndef")),
    "decomposition": ("compilerpatch/decomposition.py", DECOMPOSITION.replace(" - (-x).exp()", "")),
    "custom pass": ("compilerpatch/custom_pass.py", CUSTOM_PASS.replace("        pass\n", textwrap.indent(
        "for node in graph.nodes:\n    if node.target == torch.ops.aten.add.Tensor:\n"
        "        node.target = torch.ops.aten.sub.Tensor\n", " " * 8))),
    "codegen override": ("compilerpatch/override.py", OVERRIDE.replace("_keep(_cls.sin)", "_keep(_cls.cos)")),
    **BROKEN_REBINDS,
}
CONFTEST = '''
import os, sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import compilerpatch.lowering, compilerpatch.decomposition  # noqa: E401,F401
import compilerpatch.custom_pass, compilerpatch.override  # noqa: E401,F401
import compilerpatch.function, compilerpatch.method, compilerpatch.code, compilerpatch.closure  # noqa: E401,F401
'''
TESTS = '''
import os, pathlib

import torch

PLANTED = "planted-by-a-pull-request"


def f(x):
    return torch.sin(x) + torch.sinh(x) * 2 + 1 + torch.nn.functional.silu(x)


def test_compiled_matches_eager():
    x = torch.linspace(-1, 1, 16)
    torch.testing.assert_close(torch.compile(f)(x), f(x))


def test_no_pull_request_wrote_this_jobs_cache():
    cache = pathlib.Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
    assert not (cache / PLANTED).exists(), "a pull request's cache write reached this job"
    if (pathlib.Path(__file__).parent / "PLANT").exists():
        (cache / PLANTED).write_text("a member's pull request was here")
'''
