"""A cold pull-request job with and without the host's precompiled-header seed (runners/header_seed.py).

Each pair: two untrusted jobs of a repository whose cache is empty (a new repository's first pull requests, or any
pull request before the default branch's first push), one on a runner whose seed directory cannot be made (so it
has none: the job builds inductor's header, as before), one with the seed; the order alternates pair by pair. The
job compiles and runs a small MLP forward and backward (the first compile every suite job does), or, with
`--suite`, runs that built-in suite (`--select` a -k expression). Times are runner.run()'s: cache set-up to
container removed. The seed itself is archived out of the image before the first pair (printed apart).

`python -m bench.header_seed [--runner docker|local] [--pairs 3] [--suite correctness --select EXPR] [--out DIR]`
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from runners import header_seed
from runners.compile_cache import UNTRUSTED, CacheScope
from runners.docker_runner import DockerRunner
from runners.local import LocalRunner
from runners.protocol import Runner, RunSpec

ROOT = Path(__file__).resolve().parent.parent
MLP = ("import torch\n"
       "m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))\n"
       "torch.compile(m)(torch.randn(16, 32)).sum().backward()\n")


def job(runner: Runner, work: Path, name: str, args: argparse.Namespace) -> float:
    checkout, out = work / "checkout", work / name
    checkout.mkdir(exist_ok=True)
    if args.suite:
        command: tuple[str, ...] = (runner.python, "-m", "suites.pytest_entry", "-q", "-p", "no:cacheprovider", "-p",
                                    "suites.plugin", str(ROOT / "suites" / args.suite), "-k", args.select)
    else:
        command = (runner.python, "-c", MLP)
    env = {"COMPILE_CI_DEVICE": "cpu", "COMPILE_CI_CHECKOUT": str(checkout), "COMPILE_CI_TARGETS": "{}",
           "COMPILE_CI_OUTPUT_DIR": str(out), "PYTHONPATH": str(ROOT) if isinstance(runner, LocalRunner) else ""}
    spec = RunSpec(job_id=f"bench-seed-{name}", command=command, checkout_dir=checkout, output_dir=out,
                   timeout_s=1800, env=env, cache=CacheScope(work / f"cache-{name}", "1", UNTRUSTED, 5),
                   suites_dir=ROOT / "suites")
    started = time.monotonic()
    result = runner.run(spec)
    wall = time.monotonic() - started
    if result.exit_code not in (0, 1):
        raise SystemExit(f"{name}: exit {result.exit_code} {result.infra_error}\n{spec.log_path.read_text()[-2000:]}")
    return wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runner", choices=("docker", "local"), default="docker")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--suite", default="")
    parser.add_argument("--select", default="")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="compile-ci-bench-seed-"))
    runners: dict[str, Runner] = {}
    rows: dict[str, object] = {"runner": args.runner, "suite": args.suite or "MLP", "select": args.select,
                               "cpus": os.cpu_count(), "load_average_before": os.getloadavg()}
    try:
        for kind in ("with", "without"):
            runners[kind] = DockerRunner() if args.runner == "docker" else LocalRunner()
        (work / "no-seed").write_text("a file: the seed's directory cannot be made under it\n")
        started = time.monotonic()
        os.environ[header_seed.SEED_ENV] = str(work / "seeds")
        job(runners["with"], work, "seed-warmup", args)  # archives (or builds) the seed once, as a host's first job
        rows["first job, taking the seed"] = round(time.monotonic() - started, 1)
        walls: dict[str, list[float]] = {"with": [], "without": []}
        for pair in range(args.pairs):
            for kind in (("without", "with") if pair % 2 == 0 else ("with", "without")):
                os.environ[header_seed.SEED_ENV] = str(work / ("seeds" if kind == "with" else "no-seed"))
                walls[kind].append(job(runners[kind], work, f"{kind}-{pair}", args))
                print(f"pair {pair + 1}: {kind} the seed {walls[kind][-1]:.1f} s", flush=True)
        for kind, values in walls.items():
            rows[f"{kind} the seed, median s"] = round(statistics.median(values), 1)
            rows[f"{kind} the seed, all s"] = [round(v, 1) for v in values]
        rows["load_average_after"] = os.getloadavg()
        print(f"cold pull-request job: {rows['without the seed, median s']} s without the seed, "
              f"{rows['with the seed, median s']} s with it (medians of {args.pairs}); "
              f"first job taking the seed: {rows['first job, taking the seed']} s")
    finally:
        for runner in runners.values():
            if isinstance(runner, DockerRunner):
                runner.close()
        shutil.rmtree(work, ignore_errors=True)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "header_seed.json").write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
