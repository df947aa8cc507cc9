"""A job's process exit with inductor's compile-worker pool running: the workers killed (suites/compile_workers.py,
the default) against inductor's own shutdown at exit, which waits for every worker; pairs interleaved.

Each run is a job's process as the runner starts it (`python -m suites.pytest_entry`, COMPILE_CI_OUTPUT_DIR set)
on one test that starts the pool as a CUDA job's first compile does (`--workers` compile threads; a CPU torch
without triton never starts one by itself). Printed per variant, as medians: the job's wall, and its exit (from
pytest's end, stamped by bench/phase_clock.py, to the process gone). The other side runs the same entry with
`compile_workers.end` replaced by a no-op.

Run from the repository root: `python -m bench.compile_workers_exit [--pairs 5] [--workers 4]`. On a GPU host the
job's real exit is measured by `python -m bench.job_startup --runner local --device cuda` ("process exit").
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST = '''
from torch._inductor import async_compile

def test_compiles_with_the_pool():
    async_compile.AsyncCompile.warm_pool()
    async_compile.AsyncCompile.wakeup()
    async_compile.AsyncCompile.wait_pool_ready()
'''
KEPT = ("import sys; from suites import compile_workers, pytest_entry; compile_workers.end = lambda: None; "
        "sys.argv[0] = 'pytest_entry'; pytest_entry.main()")
DONE = re.compile(r"^\[phase\] pytest done (\d+\.\d+)$", re.MULTILINE)


def run(variant: str, scratch: Path, workers: int) -> tuple[float, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COMPILE_CI_OUTPUT_DIR": str(scratch / "out"),
           "TORCHINDUCTOR_COMPILE_THREADS": str(workers), "TORCHINDUCTOR_CACHE_DIR": str(scratch / "inductor")}
    entry = ["-m", "suites.pytest_entry"] if variant == "killed" else ["-c", KEPT]
    started = time.time()
    done = subprocess.run([sys.executable, *entry, "test_pool.py", "-q", "-p", "no:cacheprovider", "-p",
                           "bench.phase_clock"], cwd=scratch, env=env, capture_output=True, text=True, timeout=300,
                          start_new_session=True)
    gone = time.time()
    stamp = DONE.search(done.stdout)
    if done.returncode != 0 or stamp is None:
        raise SystemExit(f"{variant}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return gone - started, gone - float(stamp.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float]]] = {"killed": [], "inductor's shutdown": []}
    with tempfile.TemporaryDirectory(prefix="compile-ci-bench-exit-") as tmp:
        scratch = Path(tmp)
        (scratch / "out").mkdir()
        (scratch / "test_pool.py").write_text(TEST)
        for pair in range(args.pairs):
            order = list(results) if pair % 2 == 0 else list(reversed(results))
            for variant in order:
                results[variant].append(run(variant, scratch, args.workers))
            print(f"pair {pair + 1}: " + ", ".join(f"{v} {results[v][-1][0]:.2f} s (exit {results[v][-1][1]:.2f} s)"
                                                     for v in results), flush=True)
    print(f"{args.workers} compile workers, medians of {args.pairs} (os.cpu_count() {os.cpu_count()}):")
    for variant, runs in results.items():
        print(f"  {variant:20} job wall {statistics.median(r[0] for r in runs):.2f} s, "
              f"exit {statistics.median(r[1] for r in runs):.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
