"""What each architecture of the breadth corpus costs cold, and what it brings: per case, the wall time of its
compiled-vs-eager-vs-fp64 judgement (forward and backward) from an empty compile cache, the C++ kernels inductor
compiled for it, the op families it lowered, and how many of those no other case brings.

    python bench/breadth_cost.py [--cases unet_block,losses] [--forward-only]

On CPU every kernel is its own g++ run, and most of a run is fixed (parsing inductor's C++ prefix headers): the
script also times one trivial kernel with those headers, the floor every kernel pays. One process, one empty
cache (a temporary TORCHINDUCTOR_CACHE_DIR), the one-time set-up of inductor paid before the first case.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="compile-ci-breadth-cost-")

import torch  # noqa: E402
from torch._dynamo.utils import compilation_time_metrics  # noqa: E402

from suites.correctness.test_breadth_models import CASES  # noqa: E402
from suites.correctness.test_correctness import _check_against_eager  # noqa: E402
from suites.coverage import CoverageRecorder  # noqa: E402


def kernel_floor_s() -> float:
    """Seconds to build one kernel that does nothing but include inductor's C++ prefix (after a first build)."""
    from torch._inductor.codecache import CppPythonBindingsCodeCache

    source = '#include <torch/csrc/inductor/cpp_prefix.h>\nextern "C" void kernel(float* out) {{ out[0] = {}f; }}\n'
    CppPythonBindingsCodeCache.load_pybinding(["float*"], source.format(1.0))
    start = time.perf_counter()
    CppPythonBindingsCodeCache.load_pybinding(["float*"], source.format(2.0))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--forward-only", action="store_true")
    args = parser.parse_args()
    recorder = CoverageRecorder()
    recorder.install()
    torch.compile(lambda x: x.sin() + 1)(torch.randn(4, requires_grad=True)).sum().backward()  # one-time set-up
    print(f"one trivial C++ kernel: {kernel_floor_s():.2f} s")
    rows: dict[str, tuple[float, int, set[str]]] = {}
    for name in args.cases.split(","):
        factory, make_inputs, train = CASES[name]
        model = factory().train(train)
        torch._dynamo.reset()
        compilation_time_metrics.clear()
        recorder.current = name
        start = time.perf_counter()
        _check_against_eager(model, model, make_inputs("cpu"), backward=not args.forward_only)
        seconds = time.perf_counter() - start
        families = set().union(*recorder.per_test.get(name, {}).values())
        rows[name] = (seconds, len(compilation_time_metrics.get("compile_file", [])), families)
    report = recorder.report("cpu")
    counted = set(report["covered"]) | set(report["uncovered"])
    print(f"{'case':<22} {'cold s':>7} {'kernels':>8} {'families':>9} {'only here':>10}")
    for name, (seconds, kernels, families) in rows.items():
        others = set().union(*(f for n, (_, _, f) in rows.items() if n != name))
        mine = families & counted
        print(f"{name:<22} {seconds:>7.1f} {kernels:>8} {len(mine):>9} {len(mine - others):>10}")
    total = sum(seconds for seconds, _, _ in rows.values())
    print(f"{'total':<22} {total:>7.1f} {sum(k for _, k, _ in rows.values()):>8} {len(report['covered']):>9}")


if __name__ == "__main__":
    main()
