"""Named places of torch's compiler that the old list of known places missed (issue 38), and `restored()`.

In a fresh interpreter, as a job has one: a repository's package rebinds, at import, a function of a module of
inductor (the issue's false green), a method of a class that is no codegen override, a decomposition's `__code__`,
a lowering's closure cell, a constant inductor reads (data torch never assigns), a function of torch's over another
of torch's (who did it cannot be told: it counts), a class and a module of torch's. Each is a change with its place,
kind and file; the key is the same for the same code and another for other code; `restored()` puts torch's own
objects back for its body (no key then) and the repository's after. The property over the whole space is
tests/suites/test_compiler_surface_property.py; through the service, tests/integration/test_cache_verdicts.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# The repository's package: what each import changes (a patch that keeps the numbers, as a stack's would).
REBINDS = '''
import functools, sys, types

import torch
from torch._inductor import graph, lowering, decomposition
from torch._inductor.codegen import cpp

_value_to_cpp = cpp.value_to_cpp


@functools.wraps(_value_to_cpp)
def value_to_cpp(value, cpp_type):
    return _value_to_cpp(value, cpp_type){suffix}


cpp.value_to_cpp = value_to_cpp
_call_function = graph.GraphLowering.call_function


def call_function(self, target, args, kwargs):
    return _call_function(self, target, args, kwargs)


graph.GraphLowering.call_function = call_function


def silu(x):
    return x / (1 + x.neg().exp())


decomposition.silu.__wrapped__.__code__ = silu.__code__
_sin = lowering.lowerings[torch.ops.aten.sin.default]
_cell = _sin.__closure__[_sin.__code__.co_freevars.index("decomp_fn")]
_decomp = _cell.cell_contents


def decomp_fn(*args, **kwargs):
    return _decomp(*args, **kwargs)


_cell.cell_contents = decomp_fn
cpp.INDEX_TYPE = "int64_t "
lowering.make_pointwise, lowering.make_foreach_pointwise = lowering.make_foreach_pointwise, lowering.make_pointwise


class Kernel(cpp.CppKernel):
    def marker(self):
        return "the repository's"


cpp.CppKernel = Kernel
stand_in = types.ModuleType("torch._inductor.codegen.cpp_wrapper_cpu")
sys.modules["torch._inductor.codegen.cpp_wrapper_cpu"], replaced = stand_in, sys.modules.get(
    "torch._inductor.codegen.cpp_wrapper_cpu")
'''
SCRIPT = '''
import json, sys
from suites import compiler_surface as surface
surface.install()
import torch._inductor.compile_fx, torch._inductor.codegen.cpp_wrapper_cpu
from torch._inductor import lowering
from torch._inductor.codegen import cpp
seen = {"stock": surface.fingerprint()}
WRAPPER = "torch._inductor.codegen.cpp_wrapper_cpu"
stock = (cpp.value_to_cpp, cpp.CppKernel, lowering.make_pointwise, sys.modules[WRAPPER])
import rebinds
seen["changes"] = [[c.place, c.kind, c.where] for c in surface.changes()]
seen["key"] = surface.fingerprint()
with surface.restored() as kept:
    seen["inside"] = surface.fingerprint()
    now = (cpp.value_to_cpp, cpp.CppKernel, lowering.make_pointwise, sys.modules[WRAPPER])
    seen["torch's back"] = [a is b for a, b in zip(stock, now)]
    seen["kept"] = [c.place for c in kept]
seen["after"] = surface.fingerprint()
seen["repository's back"] = cpp.value_to_cpp is rebinds.value_to_cpp and cpp.CppKernel is rebinds.Kernel
print(json.dumps(seen))
'''
PLACES = {
    "torch._inductor.codegen.cpp.value_to_cpp": ("rebound", "rebinds.py:"),
    "torch._inductor.graph.GraphLowering.call_function": ("rebound", "rebinds.py:"),
    "torch._inductor.decomposition.silu.__wrapped__.__code__": ("rebound", "rebinds.py:"),
    "torch._inductor.codegen.cpp.INDEX_TYPE": ("rebound", ""),
    "torch._inductor.lowering.make_pointwise": ("rebound", ""),  # another of torch's functions: still a change
    "torch._inductor.lowering.make_foreach_pointwise": ("rebound", ""),
    "torch._inductor.codegen.cpp.CppKernel": ("rebound", "rebinds.py:"),
    "torch._inductor.codegen.cpp_wrapper_cpu": ("module replaced", ""),
}


def run_package(package: Path, files: dict[str, str], script: str) -> dict:
    """`script` in a fresh interpreter, with `package` (holding `files`) as the repository's checkout on its path:
    the JSON of its last line."""
    package.mkdir(exist_ok=True)
    for name, text in files.items():
        (package / name).write_text(text)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(package)]), "COMPILE_CI_CHECKOUT": str(package)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env,
                          cwd=package)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(tmp_path: Path, suffix: str) -> dict:
    return run_package(tmp_path / f"v{len(suffix)}", {"rebinds.py": REBINDS.format(suffix=suffix)}, SCRIPT)


def test_places_the_list_of_known_places_missed_are_changes_and_restored_puts_torch_back(tmp_path: Path) -> None:
    seen = run(tmp_path, "")
    assert seen["stock"] == "", seen
    changes = {place: (kind, where) for place, kind, where in seen["changes"]}
    for place, (kind, where) in PLACES.items():
        assert place in changes, (place, sorted(changes))
        assert changes[place][0] == kind and changes[place][1].startswith(where), (place, changes[place])
    closure = [p for p in changes if p.startswith("torch._inductor.lowering.lowerings[aten.sin") and "<closure" in p]
    assert closure and changes[closure[0]][1].startswith("rebinds.py:"), [p for p in changes if "closure" in p]
    assert seen["key"] and seen["inside"] == "" and all(seen["torch's back"]), seen
    assert seen["after"] == seen["key"] and seen["repository's back"] and seen["kept"] == [], seen
    # The same code imported again (another job of the same commit): the same key; one helper-level edit: another.
    assert run(tmp_path, "")["key"] == seen["key"]
    assert run(tmp_path, " + ''")["key"] != seen["key"]
