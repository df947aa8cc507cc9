"""A LocalRunner job forked from the host's warm interpreter against the same job started fresh (runners/warm_start.py).

A one-test job of a sample repository (one compile, over a warm trusted cache), through the real LocalRunner, pairs
interleaved (fresh, forked) after one unmeasured job that fills the cache and starts the warm interpreter: each
job's wall (runner.run) and the CPU time of its processes (what the job's reaper gained in children's time: the
runner for a fresh job, the warm interpreter for a forked one). From the repository root:
`python -m bench.warm_start [--pairs 5] [--device cuda] [--install] [--out DIR]`.

`--install`: the sample is a package (pyproject.toml) and the job goes through the install step, as every pipeline
job does (service/jobs/install.py: `pip install -e .` of the checkout's copy in the job, then the tests).

`--suite`: triples instead of pairs (fresh, forked from the interpreter that imported torch and pytest, forked from
the one that also made the compiler's imports, suites/warm_compiler.py), the test run as a built-in suite's (a
directory outside the checkout, compile-ci's coverage plugin in its conftest) for the fresh and the compiler's, and as
the repository's own tests (`--rootdir`, the same conftest) for the torch one; each row adds the tests' own time
(JUnit) and the overhead (wall - tests).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from runners import warm_start
from runners.compile_cache import TRUSTED, CacheScope
from runners.local import LocalRunner
from runners.protocol import RunSpec
from service.jobs import install
from service.jobs.pipeline import pytest_command

ROOT = Path(__file__).resolve().parents[1]
TEST = '''
import os

import torch


def test_compiles():
    f = torch.compile(lambda x: torch.nn.functional.gelu(x) * 2 + torch.sin(x))
    x = torch.linspace(-3, 3, 64, device=os.environ["COMPILE_CI_DEVICE"])
    torch.testing.assert_close(f(x), torch.nn.functional.gelu(x) * 2 + torch.sin(x))
'''

PYPROJECT = """
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "benchpkg"
version = "0.1"

[tool.setuptools]
packages = ["benchpkg"]
"""


def _children_cpu(pid: int) -> float:
    """User + system seconds of a process's reaped children (/proc/<pid>/stat's cutime and cstime)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def one(runner: LocalRunner, repo: Path, out: Path, warm: bool, expect_forked: bool, device: str,
        wrapped: bool = False, suite: Path | None = None) -> dict[str, float]:
    runner.warm = warm
    command = (*pytest_command(runner.python, out / "junit.xml"),
               *(("--rootdir", str(repo), str(repo / "tests")) if suite is None else (str(suite),)))
    if wrapped:
        command = tuple(install.wrap(list(command), runner.python, repo, None, True))
    env = {"COMPILE_CI_DEVICE": device, "COMPILE_CI_CHECKOUT": str(repo), "COMPILE_CI_OUTPUT_DIR": str(out),
           "COMPILE_CI_TARGETS": "{}", "COMPILE_CI_DEADLINE": str(int(time.time() + 600))}
    reapers = [os.getpid(), *(w.proc.pid for w in warm_start._pool.values())]  # a forked job is the warm one's child
    before = sum(map(_children_cpu, reapers))
    started = time.monotonic()
    result = runner.run(RunSpec(job_id=out.name, command=command, checkout_dir=repo, output_dir=out, timeout_s=600,
                                device=device, env=env, cache=CacheScope(repo.parent / "cache", "bench", TRUSTED, None),
                                suites_dir=ROOT / "suites"))
    wall = time.monotonic() - started
    cpu = sum(map(_children_cpu, reapers)) - before
    log = (out / "log.txt").read_text(errors="replace")
    forked = "forked from this host's warm interpreter" in log and "starts a fresh interpreter" not in log
    ahead = "dynamo and inductor imported once" in log
    if result.exit_code != 0 or forked != expect_forked or (suite is not None and forked and not ahead):
        raise SystemExit(f"{out.name}: exit {result.exit_code}, forked {forked}:\n"
                         f"{(out / 'log.txt').read_text()[-3000:]}")
    import xml.etree.ElementTree as ET

    tests = sum(float(case.get("time", 0)) for case in ET.parse(out / "junit.xml").getroot().iter("testcase"))
    return {"wall": wall, "cpu": cpu, "tests": tests, "overhead": wall - tests}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--install", action="store_true", help="the job through the install step, as a pipeline's")
    parser.add_argument("--suite", action="store_true", help="fresh, torch's and the compiler's warm interpreters")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="compile-ci-bench-warm-"))
    (root / "repo" / "tests").mkdir(parents=True)
    (root / "repo" / "tests" / "test_one.py").write_text(TEST)
    suite = root / "suite" if args.suite else None
    if suite is not None:
        suite.mkdir()
        (suite / "test_one.py").write_text(TEST)
        for folder in (suite, root / "repo" / "tests"):
            (folder / "conftest.py").write_text('pytest_plugins = ("suites.coverage",)\n')  # as compile-ci's suites
    if args.install:
        (root / "repo" / "benchpkg").mkdir()
        (root / "repo" / "benchpkg" / "__init__.py").write_text("")
        (root / "repo" / "pyproject.toml").write_text(PYPROJECT)
    runner = LocalRunner(warm=True)
    # Unmeasured: fills the trusted cache and, finding no warm interpreter for its environment, starts one.
    one(runner, root / "repo", root / "fill", True, False, args.device, args.install, suite)
    if suite is not None:  # and the torch one
        one(runner, root / "repo", root / "fill-torch", True, False, args.device, args.install)
    kinds = ("fresh", "forked", "compiler") if suite is not None else ("fresh", "forked")
    rows: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
    for index in range(args.pairs):
        for kind in kinds:
            if kind != "fresh" and not warm_start.wait_until_ready(180):
                raise SystemExit("the warm interpreter did not start")
            rows[kind].append(one(runner, root / "repo", root / f"{kind}{index}", kind != "fresh", kind != "fresh",
                                  args.device, args.install, suite if kind != "forked" else None))
            row = rows[kind][-1]
            print(f"round {index + 1} {kind}: wall {row['wall']:.2f} s, cpu {row['cpu']:.2f} s, "
                  f"tests {row['tests']:.2f} s, overhead {row['overhead']:.2f} s", flush=True)
    report = {"host": {"cpus": os.cpu_count(), "machine": platform.machine(), "load_average": os.getloadavg()},
              "device": args.device, "install_step": args.install,
              "pairs": args.pairs, "rows": rows,
              "median": {k: {m: round(statistics.median(r[m] for r in v), 2) for m in ("wall", "cpu", "overhead")}
                         for k, v in rows.items()}}
    print(json.dumps(report["median"]))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "warm_start.json").write_text(json.dumps(report, indent=2))
    warm_start.close_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
