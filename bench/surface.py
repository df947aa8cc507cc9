"""What the compiler surface (suites/compiler_surface.py) costs a job: the snapshot at start, the import hook, and
the diff before every compile.

In fresh interpreters, as a job starts (`import torch`, then `install()`):
- the snapshot: wall time of `install()`, the Python memory it holds (tracemalloc) and the process's resident
  memory before and after (VmRSS);
- the import hook: importing inductor's compile_fx and dynamo with the hook installed, against without (its windows
  bring the snapshot up to date, take each new module and absorb what torch's imports rebind);
- the diff per compile: every `refresh_tag()` while compiling COMPILES graphs (a function, a module with its
  backward, dynamic shapes, a convolution, `max-autotune-no-cudagraphs`), first and the rest;
- the same diff while a repository's change is in place (a rebound function of inductor's), and while nothing moved
  at all (the fast path alone).

Run from the repository root as a module: `python -m bench.surface [--repeat 3]`. Prints one line per figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
START = '''
import json, os, sys, time, tracemalloc
def rss():
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmRSS")).split()[1]) / 1024
import torch
before = rss()
traced = sys.argv[1] == "memory"  # tracemalloc slows allocation down: memory and time are taken in separate runs
if traced:
    tracemalloc.start()
started = time.perf_counter()
from suites import compiler_surface as surface
surface.install()
seconds = time.perf_counter() - started
held = tracemalloc.get_traced_memory()[0] if traced else 0
state = surface._state
print(json.dumps({"install_s": seconds, "python_mib": held / 2**20, "rss_mib": rss() - before,
                  "modules": len(state.snapshot.modules), "namespaces": len(state.snapshot.regions),
                  "functions": len(state.snapshot.functions)}))
'''
IMPORTS = '''
import json, sys, time
import torch
if sys.argv[1] == "hooked":
    from suites import compiler_surface as surface
    surface.install()
started = time.perf_counter()
import torch._dynamo, torch._inductor.compile_fx, torch._inductor.lowering, torch._inductor.codegen.cpp
print(json.dumps({"import_s": time.perf_counter() - started}))
'''
COMPILES = '''
import gc, json, time
import torch
from suites import compiler_surface as surface
surface.install()
import torch._inductor.compile_fx
times, keys, collected = [], [], [0.0, 0.0]
def watch_gc(phase, info):
    if phase == "start":
        collected[1] = time.perf_counter()
    else:
        collected[0] += time.perf_counter() - collected[1]
gc.callbacks.append(watch_gc)
original = surface.refresh_tag
first_gc = []
def timed():
    before = collected[0]
    started = time.perf_counter()
    keys.append(original())
    times.append(time.perf_counter() - started)
    first_gc.append(collected[0] - before)
surface.refresh_tag = timed
f = torch.compile(lambda x: torch.sin(x) + torch.sinh(x) * 2 + 1)
f(torch.randn(8)); f(torch.randn(9, 3))
block = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
torch.compile(block)(torch.randn(2, 8)).sum().backward()
torch.compile(torch.nn.Conv2d(3, 4, 3))(torch.randn(1, 3, 8, 8))
torch.compile(lambda x: torch.softmax(x, -1).cumsum(0), dynamic=True)(torch.randn(5, 6))
with torch.no_grad():
    torch.compile(block.eval(), mode="max-autotune-no-cudagraphs")(torch.randn(2, 8))
quiet = []
for _ in range(50):
    started = time.perf_counter(); original(); quiet.append(time.perf_counter() - started)
from torch._inductor.codegen import cpp
stock = cpp.value_to_cpp
cpp.value_to_cpp = lambda value, cpp_type: stock(value, cpp_type)
changed = []
for _ in range(50):
    started = time.perf_counter(); original(); changed.append(time.perf_counter() - started)
print(json.dumps({"per_compile_s": times, "gc_s": first_gc, "keys": sorted(set(keys)), "quiet_s": quiet,
                  "changed_s": changed}))
'''


def run(script: str, *args: str) -> dict[str, Any]:
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "TORCHINDUCTOR_FX_GRAPH_CACHE": "0",
           "TORCHINDUCTOR_AUTOGRAD_CACHE": "0", "HOME": "/tmp"}
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, env=env, cwd=ROOT,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def ms(values: list[float]) -> str:
    return f"median {1000 * statistics.median(values):.1f} ms, max {1000 * max(values):.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    repeat = parser.parse_args().repeat
    starts = [run(START, "time") for _ in range(repeat)]
    memory = [run(START, "memory") for _ in range(repeat)]
    last = starts[-1]
    print(f"snapshot at start: install() {ms([s['install_s'] for s in starts])}; "
          f"{last['modules']} modules, {last['namespaces']} namespaces, {last['functions']} functions")
    print(f"snapshot memory: {statistics.median(s['python_mib'] for s in memory):.1f} MiB of Python objects, "
          f"resident +{statistics.median(s['rss_mib'] for s in starts):.1f} MiB")
    plain = [run(IMPORTS, "plain")["import_s"] for _ in range(repeat)]
    hooked = [run(IMPORTS, "hooked")["import_s"] for _ in range(repeat)]
    print(f"importing dynamo and inductor: {statistics.median(plain):.2f} s without the hook, "
          f"{statistics.median(hooked):.2f} s with it")
    compiles = run(COMPILES)
    per, collected = compiles["per_compile_s"], compiles["gc_s"]
    print(f"diff per compile over {len(per)} compiles (a control: keys {compiles['keys']}): first "
          f"{1000 * per[0]:.1f} ms ({1000 * collected[0]:.1f} ms of it the garbage collector's, over torch's heap), "
          f"the rest {ms(per[1:])}")
    print(f"diff with nothing moved since the last: {ms(compiles['quiet_s'])}")
    print(f"diff with a function of inductor's rebound: {ms(compiles['changed_s'])}")


if __name__ == "__main__":
    main()
