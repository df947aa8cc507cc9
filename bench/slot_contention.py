"""Why jobs on several slots of one host run slower than alone: the same warm suite job, alone and four at once, with
the host's CPUs shared or dealt out.

The job: one built-in suite (default autograd) on a --targets repository's tests selected by -k (default resnet:
the real-model sample's slowest tests on a GPU host), through LocalRunner, on a compile cache that a first
(unmeasured) run of the same job filled, so every measured job is warm. Variants, each run after the last:

- `1 job`: alone, as a worker of one slot runs it;
- `N jobs`: N copies at once on the whole host (what N worker slots did before each job got its own cores);
- `N jobs, own cores`: each copy on its own 1/N of the host's CPUs (`taskset`), so torch's threads and inductor's
  compile workers (both sized from the CPUs a process may use) are 1/N as many;
- `N jobs, own cores, compile threads 1` and `1 job, compile threads 1`: inductor's compile pool off
  (TORCHINDUCTOR_COMPILE_THREADS=1), which a warm job does not need.

For each: the slowest job's wall, the median job's wall and its tests' time (junit), and the CPU time every job's
processes used (the worker's children, counted when reaped). Prints a table and a JSON line; `--out DIR` writes
slot_contention.json there.

    python -m bench.slot_contention --device cuda --targets tests/suites/models_repo [--suite autograd]
                                    [--select resnet] [--jobs 4] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from bench.suites import ROOT, run_suite, targets_env


def tests_seconds(junit: Path) -> float:
    try:
        return round(sum(float(c.get("time") or 0) for c in ET.parse(junit).getroot().iter("testcase")), 2)
    except (OSError, ET.ParseError):
        return 0.0


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def variant(args: argparse.Namespace, base: Path, name: str, jobs: int, own_cores: bool, threads: str) -> dict:
    cpus = sorted(os.sched_getaffinity(0))
    share = max(1, len(cpus) // jobs)
    results: list[dict] = [{} for _ in range(jobs)]

    def one(index: int) -> None:
        extra = dict(targets_env(args.targets))
        if threads:
            extra["TORCHINDUCTOR_COMPILE_THREADS"] = threads
        prefix: tuple[str, ...] = ()
        if own_cores:
            mine = cpus[index * share:(index + 1) * share]
            prefix = ("taskset", "-c", ",".join(map(str, mine)))
        out = base / name.replace(" ", "_").replace(",", "") / str(index)
        results[index] = run_suite(args.suite, args.device, base / "cache", out, extra, args.select, prefix=prefix)
        results[index]["tests_s"] = tests_seconds(out / "junit.xml")

    cpu_before, start = children_cpu(), time.monotonic()
    threads_ = [threading.Thread(target=one, args=(i,)) for i in range(jobs)]
    for thread in threads_:
        thread.start()
    for thread in threads_:
        thread.join()
    walls = [float(r["wall_s"]) for r in results]
    row = {"variant": name, "jobs": jobs, "wall_s": round(time.monotonic() - start, 1), "slowest_s": max(walls),
           "median_s": statistics.median(walls), "median_tests_s": statistics.median(r["tests_s"] for r in results),
           "cpu_s": round(children_cpu() - cpu_before, 1), "passed": [r["passed"] for r in results],
           "failed": sum(int(r["failed"]) for r in results), "exits": [r["exit"] for r in results]}
    print(f"{name:<42} slowest {row['slowest_s']:>6.1f} s  median {row['median_s']:>6.1f} s  tests "
          f"{row['median_tests_s']:>6.1f} s  cpu {row['cpu_s']:>7.1f} s  passed {row['passed']}  "
          f"failed {row['failed']}", flush=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    parser.add_argument("--targets", type=Path, default=ROOT / "tests" / "suites" / "models_repo")
    parser.add_argument("--suite", default="autograd")
    parser.add_argument("--select", default="resnet")
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="compile-ci-bench-slots-"))
    n = args.jobs
    print(f"{len(os.sched_getaffinity(0))} cpus; {args.suite} -k {args.select} on {args.device}", flush=True)
    fill = run_suite(args.suite, args.device, base / "cache", base / "fill", targets_env(args.targets), args.select)
    print(f"fill (cold, unmeasured): {fill['wall_s']} s, passed {fill['passed']}, failed {fill['failed']}",
          flush=True)
    rows = [variant(args, base, *spec) for spec in (
        ("1 job", 1, False, ""), (f"{n} jobs", n, False, ""), (f"{n} jobs, own cores", n, True, ""),
        (f"{n} jobs, own cores, compile threads 1", n, True, "1"), ("1 job, compile threads 1", 1, False, "1"))]
    report = {"cpus": len(os.sched_getaffinity(0)), "suite": args.suite, "select": args.select,
              "device": args.device, "fill": fill, "rows": rows, "python": sys.version.split()[0]}
    print(json.dumps(report))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "slot_contention.json").write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
