"""Test-only: real inductor output code from torch.compile, compiled once per test session in a subprocess.

`f` and `f_again` are the same function body compiled one after the other in one process (so inductor numbers
them differently), each under its own fresh cache folder; `g` differs from `f` in one operation (cos for sin).
The subprocess keeps dynamo's global state out of the test process.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import tempfile
from pathlib import Path

_SCRIPT = r'''
import json, os, sys, tempfile
import torch
from torch._inductor.utils import run_and_get_code

def f(x, y):
    return (x.sin() + y).relu() * 2

def f_again(x, y):
    return (x.sin() + y).relu() * 2

def g(x, y):
    return (x.cos() + y).relu() * 2

def two_graphs(x):  # a graph break in the middle: two graphs
    y = x.sin() + 1
    torch._dynamo.graph_break()
    return y.cos() * 3

codes = {}
for name, fn, args in [("f", f, 2), ("f_again", f_again, 2), ("g", g, 2), ("two_graphs", two_graphs, 1)]:
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(dir=sys.argv[1])
    torch._dynamo.reset()
    inputs = [torch.randn(8, 16) for _ in range(args)]
    codes[name] = run_and_get_code(torch.compile(fn), *inputs)[1]
print(json.dumps(codes))
'''


@functools.cache
def compiled_codes() -> dict[str, list[str]]:
    """{"f": [code], "f_again": [code], "g": [code], "two_graphs": [code, code]}."""
    with tempfile.TemporaryDirectory(prefix="inductor-pair-") as folder:
        done = subprocess.run([sys.executable, "-c", _SCRIPT, folder], capture_output=True, text=True,
                              timeout=600, check=False, env={"PATH": "/usr/bin:/bin", "HOME": folder,
                                                            "TORCHINDUCTOR_FX_GRAPH_CACHE": "0"})
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def write_codes(folder: Path, codes: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for index, code in enumerate(codes):
        (folder / f"output_code_{index}.py").write_text(code)
