"""A shard's overhead on the DockerRunner, with and without pre-started containers (runners/docker_prestart.py):
pull-request jobs of the stand-in zoo, one after another on one slot, each job's wall (runner.run) against its
tests' own time (JUnit), overhead = wall - tests; the jobs with fresh containers, then those with pre-started ones
(a block each: a job's next container imports beside it, as on a worker; the first job of each block, which finds
no container waiting, is left out of the figures).

    python -m bench.prestart --jobs 6 --select "declared and resnet_block" [--gap 0]

--gap: seconds between jobs (0: back to back, the next container importing while a job runs beside it on the same
CPUs; a few seconds: a queue with room between jobs). Needs dockerd and compile-ci/runner-cpu:latest.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

from bench.job_startup import zoo_files, zoo_targets
from runners.compile_cache import CacheScope
from runners.docker_runner import DockerRunner
from runners.protocol import RunSpec

ROOT = Path(__file__).resolve().parents[1]


def spec_for(work: Path, checkout: Path, name: str, select: str, suite: str) -> RunSpec:
    out = work / "out" / name
    command = ("python", "-m", "suites.pytest_entry", "-v", "-p", "no:cacheprovider", "-p", "suites.plugin",
               "-o", "junit_family=xunit1", f"--junitxml={out / 'junit.xml'}", str(ROOT / "suites" / suite),
               *(("-k", select) if select else ()))
    env = {"COMPILE_CI_DEVICE": "cpu", "COMPILE_CI_CHECKOUT": str(checkout), "COMPILE_CI_OUTPUT_DIR": str(out),
           "COMPILE_CI_TARGETS": (checkout / "zoo" / "targets.json").read_text(), "PYTHONPATH": str(checkout)}
    return RunSpec(job_id=f"bench-prestart-{name}-{uuid.uuid4().hex[:6]}", command=command, checkout_dir=checkout,
                   output_dir=out, timeout_s=1800, env=env, cache=CacheScope(work / "cache", "bench", "untrusted", 1),
                   suites_dir=ROOT / "suites")


def timed(runner: DockerRunner, spec: RunSpec) -> tuple[float, float]:
    started = time.monotonic()
    result = runner.run(spec)
    wall = time.monotonic() - started
    if result.exit_code != 0:
        raise SystemExit(f"{spec.job_id}: exit {result.exit_code} {result.infra_error or ''}\n"
                         f"{spec.log_path.read_text(errors='replace')[-3000:]}")
    tests = sum(float(case.get("time", 0)) for case in ET.parse(spec.output_dir / "junit.xml").iter("testcase"))
    return wall, tests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=6, help="jobs of each kind after the first")
    parser.add_argument("--zoo", type=int, default=6)
    parser.add_argument("--suite", default="correctness")
    parser.add_argument("--select", default="declared and resnet_block")
    parser.add_argument("--gap", type=float, default=0.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="compile-ci-bench-prestart-"))
    checkout = work / "checkout"
    for path, text in zoo_files(args.zoo).items():
        (checkout / path).parent.mkdir(parents=True, exist_ok=True)
        (checkout / path).write_text(text)
    (checkout / "zoo" / "targets.json").write_text(zoo_targets(args.zoo))
    deployment = f"bench-prestart-{uuid.uuid4().hex[:8]}"
    fresh, warm = DockerRunner(deployment=deployment), DockerRunner(deployment=deployment + "-warm", warm=True)
    figures: dict[str, list[tuple[float, float]]] = {"fresh containers": [], "pre-started containers": []}
    try:
        # The repository's trusted cache first (a push), as a pull request finds it.
        trusted = spec_for(work, checkout, "push", args.select, args.suite)
        fresh.run(RunSpec(**{**trusted.__dict__, "cache": CacheScope(work / "cache", "bench", "trusted", None)}))
        for label, runner in (("fresh containers", fresh), ("pre-started containers", warm)):
            for index in range(args.jobs + 1):
                wall, tests = timed(runner, spec_for(work, checkout, f"{index}-{label[0]}", args.select, args.suite))
                if index:
                    figures[label].append((wall, tests))
                print(f"job {index} {label}: wall {wall:.2f} s, tests {tests:.2f} s, overhead {wall - tests:.2f} s",
                      flush=True)
                time.sleep(args.gap)
        taken = warm.prestarts.taken if warm.prestarts is not None else 0
    finally:
        for runner in (fresh, warm):
            runner.close()
            runner.sweep_leftovers()
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n== {args.suite} -k {args.select!r}, {args.jobs} jobs of each kind, gap {args.gap} s; "
          f"{taken} of {args.jobs + 1} took a pre-started container ==")
    summary = {}
    for label, rows in figures.items():
        walls, tests = [w for w, _ in rows], [t for _, t in rows]
        overheads = [w - t for w, t in rows]
        summary[label] = {"wall": statistics.median(walls), "tests": statistics.median(tests),
                          "overhead": statistics.median(overheads), "overheads": [round(o, 2) for o in overheads]}
        print(f"{label:24} median wall {summary[label]['wall']:.2f} s, tests {summary[label]['tests']:.2f} s, "
              f"overhead {summary[label]['overhead']:.2f} s ({', '.join(f'{o:.2f}' for o in overheads)})")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
