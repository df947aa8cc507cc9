"""DockerRunner overhead on the correctness suite: job wall time vs bare pytest in the same container, reruns
with the persistent compile cache per trust class, and the time from `run()` to the container running.

The plan, each run's cache scope chosen by the service's own rule (`trust_class` of its trigger: only a push to the
default branch writes the trusted cache): repository A's default branch cold (empty cache), A's default branch warm
(a rerun over its trusted cache), a member's pull request of A (warm: reads A's trusted cache through its throwaway
layer, writes nothing back), a member's pull request of B (cold: B has no trusted cache yet). The disk A's trusted
cache holds afterwards is printed too.

"Bare" is pytest's own wall time measured inside the job's container by a thin wrapper around the same command,
so the ratio isolates what the runner adds (create, start, log streaming, inspect, removal). Run on an idle host:
`python bench/job_overhead.py [--runs 2] [--layer overlay|copy] [--image TAG] [--trusted-only]`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from runners.cache_size import disk_usage
from runners.compile_cache import CacheScope, RepoCache, trust_class
from runners.docker_container import container_name
from runners.docker_runner import UNTRUSTED_LAYERS, DockerRunner
from runners.protocol import RunSpec

ROOT = Path(__file__).resolve().parent.parent
WRAPPER = (
    "import json, subprocess, sys, time\n"
    "started = time.monotonic()\n"
    "code = subprocess.call(sys.argv[1:])\n"
    "json.dump({'bare_s': time.monotonic() - started}, open('/job/out/bare.json', 'w'))\n"
    "sys.exit(code)\n"
)


def job_spec(work: Path, cache: CacheScope, attempt: int) -> RunSpec:
    checkout, out = work / "checkout", work / f"out-{attempt}"
    checkout.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True)
    suites = ROOT / "suites"
    pytest = ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "suites.plugin", "-o",
              "junit_family=xunit1", f"--junitxml={out / 'junit.xml'}", str(suites / "correctness")]
    env = {"COMPILE_CI_DEVICE": "cpu", "COMPILE_CI_CHECKOUT": str(checkout), "COMPILE_CI_TARGETS": "{}",
           "COMPILE_CI_OUTPUT_DIR": str(out)}
    return RunSpec(job_id=f"bench-overhead-{attempt}", command=("python", "-c", WRAPPER, *pytest),
                   checkout_dir=checkout, output_dir=out, timeout_s=1800, env=env, cache=cache, suites_dir=suites)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=2, help="trusted runs of A: the first is cold, the others warm")
    parser.add_argument("--layer", choices=UNTRUSTED_LAYERS, default="overlay", help="pull requests' throwaway layer")
    parser.add_argument("--image", default="", help="the cpu runner image (e.g. compile-ci/runner-cpu:torch2.14)")
    parser.add_argument("--trusted-only", action="store_true", help="leave out the pull requests")
    args = parser.parse_args()
    runner = DockerRunner({"cpu": args.image} if args.image else None, untrusted_layer=args.layer)
    work = Path(tempfile.mkdtemp(prefix="compile-ci-bench-docker-"))
    root = work / "cache"
    push, pull = trust_class("push"), trust_class("pull_request")
    plan = [("A default-branch push " + ("cold" if n == 0 else "warm"), CacheScope(root, "A", push))
            for n in range(args.runs)]
    if not args.trusted_only:
        plan += [("A member's pull request (warm)", CacheScope(root, "A", pull, 1)),
                 ("B member's pull request (cold)", CacheScope(root, "B", pull, 2))]
    rows = []
    try:
        for attempt, (label, cache) in enumerate(plan):
            spec = job_spec(work, cache, attempt)
            started_wall = time.time()
            seen: dict[str, float] = {}

            def probe(spec: RunSpec = spec, seen: dict[str, float] = seen) -> bool:
                # The first poll comes ~1 s in; StartedAt is the engine's own record of when the job started.
                if "running_at" not in seen:
                    state = runner.client.containers.get(container_name(spec.job_id)).attrs["State"]
                    seen["running_at"] = _parse(state["StartedAt"])
                return False

            result = runner.run(replace(spec), probe)
            bare = json.loads((spec.output_dir / "bare.json").read_text())["bare_s"]
            rows.append({"run": label, "exit": result.exit_code, "job_s": result.duration_s, "bare_s": bare,
                         "start_s": seen.get("running_at", float("nan")) - started_wall})
            print(f"{label}: exit {result.exit_code}, job {result.duration_s:.1f} s, bare pytest "
                  f"{bare:.1f} s, job/bare {result.duration_s / bare:.3f}, run() -> running "
                  f"{rows[-1]['start_s']:.2f} s", flush=True)
        trusted_a = RepoCache.of(plan[0][1], runner.cache_key("cpu")).trusted_dir
        print(f"A's trusted cache after the runs: {disk_usage(trusted_a) / 2**20:.1f} MiB")
    finally:
        runner.close()
        shutil.rmtree(work, ignore_errors=True)
    first = rows[0]["job_s"]
    if args.runs > 1:
        print(f"default branch warm rerun / first run (job wall): {rows[1]['job_s'] / first:.2f}")
    if not args.trusted_only:
        warm, cold = rows[-2]["job_s"], rows[-1]["job_s"]
        print(f"member's pull request warm / cold: {warm / cold:.2f} (goal <= 0.2); "
              f"warm / default branch first: {warm / first:.2f}; cold / default branch first: {cold / first:.2f}")
    return 0 if all(r["exit"] == 0 for r in rows) else 1


def _parse(stamp: str) -> float:
    """Docker's RFC 3339 time with nanoseconds -> epoch seconds."""
    head, _, frac = stamp.rstrip("Z").partition(".")
    return datetime.fromisoformat(head + "+00:00").timestamp() + float("0." + (frac or "0"))


if __name__ == "__main__":
    sys.exit(main())
