"""A second worker host's first pull request: cold (its own cache only) against warm from the shared trusted cache.

Three "hosts" on this machine, each with a cache directory of its own, and one directory standing in for the volume
every host mounts (COMPILE_CI_SHARED_CACHE_DIR): host A runs a push of the default branch (trusted: fills its cache
cold and publishes it); host B, without the shared cache, runs a member's pull request (untrusted: cold, as every new
host was before); host C, with it, runs the same pull request (it pulls what A published into its own trusted
cache, then starts warm). Each job is the suite job every pull request runs (the real command, the DockerRunner and
image), timed by runner.run() (cache set-up, the pull included, to container removed).

`python -m bench.shared_cache [--suite correctness] [--image TAG] [--out DIR]`
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from runners.cache_size import disk_usage
from runners.compile_cache import TRUSTED, UNTRUSTED, CacheScope, RepoCache
from runners.docker_runner import DockerRunner
from runners.protocol import RunSpec

ROOT = Path(__file__).resolve().parent.parent


def run_job(runner: DockerRunner, work: Path, name: str, suite: str, scope: CacheScope) -> tuple[float, str]:
    checkout, out = work / "checkout", work / name
    checkout.mkdir(exist_ok=True)
    command = (runner.python, "-m", "suites.pytest_entry", "-q", "-p", "no:cacheprovider", "-p", "suites.plugin",
               "-o", "junit_family=xunit1", f"--junitxml={out / 'junit.xml'}", str(ROOT / "suites" / suite))
    env = {"COMPILE_CI_DEVICE": "cpu", "COMPILE_CI_CHECKOUT": str(checkout), "COMPILE_CI_TARGETS": "{}",
           "COMPILE_CI_OUTPUT_DIR": str(out)}
    spec = RunSpec(job_id=f"bench-shared-{name}", command=command, checkout_dir=checkout, output_dir=out,
                   timeout_s=3600, env=env, cache=scope, suites_dir=ROOT / "suites")
    started = time.monotonic()
    result = runner.run(spec)
    wall = time.monotonic() - started
    summary = [line for line in spec.log_path.read_text(errors="replace").splitlines() if " in " in line][-1:]
    if result.exit_code != 0:
        raise SystemExit(f"{name}: exit {result.exit_code} {result.infra_error}\n{spec.log_path.read_text()[-2000:]}")
    return wall, summary[0] if summary else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--suite", default="correctness")
    parser.add_argument("--image", default="", help="the cpu runner image (default compile-ci/runner-cpu:latest)")
    parser.add_argument("--out", type=Path, default=None, help="a directory for shared_cache.json")
    args = parser.parse_args()
    runner = DockerRunner({"cpu": args.image} if args.image else None)
    work = Path(tempfile.mkdtemp(prefix="compile-ci-bench-shared-"))
    shared = work / "shared-volume"
    rows: dict[str, object] = {"suite": args.suite, "image": runner.images["cpu"], "cpus": os.cpu_count(),
                               "load_average_before": os.getloadavg()}
    try:
        plan = [("host A: default-branch push, cold (publishes)", "a", CacheScope(work / "a", "1", TRUSTED,
                                                                                   shared=shared)),
                ("host B: first pull request, own cache only (cold)", "b", CacheScope(work / "b", "1", UNTRUSTED, 5)),
                ("host C: first pull request, shared cache (pulls, warm)", "c",
                 CacheScope(work / "c", "1", UNTRUSTED, 5, shared=shared))]
        walls = []
        for label, name, scope in plan:
            wall, summary = run_job(runner, work, name, args.suite, scope)
            rows[label] = round(wall, 1)
            walls.append(wall)
            print(f"{label}: {wall:.1f} s ({summary.strip('= ')})", flush=True)
        key = runner.cache_key("cpu")
        published = disk_usage(shared / key / "1" / "files")
        pulled = disk_usage(RepoCache.of(CacheScope(work / "c", "1", TRUSTED), key).trusted_dir)
        rows.update({"published_mib": round(published / 2**20, 1), "pulled_mib": round(pulled / 2**20, 1),
                     "load_average_after": os.getloadavg()})
        print(f"shared cache: {published / 2**20:.1f} MiB published, {pulled / 2**20:.1f} MiB pulled by host C; "
              f"host C / host B: {walls[2] / walls[1]:.2f}")
    finally:
        runner.close()
        shutil.rmtree(work, ignore_errors=True)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "shared_cache.json").write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
