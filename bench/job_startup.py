"""A job's fixed cost, broken down: where a warm pull-request job's seconds go before and after its tests.

Through the real runner (DockerRunner with a runner image, or LocalRunner with an interpreter: a GPU host without
Docker), for each variant given (`--image TAG` several times to compare images, or `--python PATH`):

1. warm-up: a default-branch push (trusted) runs the probe and the job once, filling that variant's compile cache;
2. `--repeats` rounds, the variants interleaved, each round a pull request's (untrusted: a throwaway layer over the
   trusted cache) run of
   - the step-by-step probe (bench/startup_probe.py): interpreter start, `import torch`, dynamo, inductor, the
     source keys (torch_key, triton_key), the CPU ISA pick or CUDA context, pytest and the plugin, the first
     compile (its g++ runs and precompiled-header step apart), a second compile, the exit;
   - the job itself: the command every job runs (`python -m suites.pytest_entry ... suites/<suite>`), with `-k`
     selecting one test (`--select`, default the first of the suite), timed by phase from the job's log: runner
     start to the interpreter, to pytest configured (imports), collected, the first test, the other tests, pytest
     done, the process gone, and the runner's return (output copied, container removed);
   - with `--whole`, the whole suite the same way.

Medians per variant are printed and written to `--out DIR/job_startup.json` with the host, torch and runner.
Examples: `python -m bench.job_startup --image compile-ci/runner-cpu:before --image compile-ci/runner-cpu:latest`;
on a GPU host without Docker: `python -m bench.job_startup --runner local --device cuda --out /tmp/startup`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from runners.compile_cache import TRUSTED, UNTRUSTED, CacheScope
from runners.local import LocalRunner
from runners.protocol import Runner, RunSpec

ROOT = Path(__file__).resolve().parent.parent
STAMP = re.compile(r"^\[phase\] (.+) (\d+\.\d+)$", re.MULTILINE)
# The wrapper: the start and the exit as the shell sees them, around the job's own command.
WRAP = 'echo "[phase] process starts $(date +%s.%N)"; "$@"; code=$?; echo "[phase] process gone $(date +%s.%N)"; ' \
       'exit $code'
PHASES = (("runner start → interpreter", "runner", "process starts"),
          ("interpreter → pytest configured (imports, plugin)", "process starts", "configured"),
          ("collection", "configured", "collected"),
          ("first test", "first test starts", "first test ends"),
          ("other tests", "first test ends", "tests end"),
          ("session end (JUnit, summary, plugin files)", "tests end", "pytest done"),
          ("process exit", "pytest done", "process gone"),
          ("runner end (output, container removed)", "process gone", "returned"))


def runner_for(args: argparse.Namespace, variant: str, root: Path) -> Runner:
    if args.runner == "local":
        # The job imports `suites` from this checkout whether or not the interpreter has compile-ci installed.
        python = root / f"python-{abs(hash(variant))}"
        python.write_text(f'#!/bin/sh\nPYTHONPATH={ROOT}${{PYTHONPATH:+:$PYTHONPATH}} exec {variant} "$@"\n')
        python.chmod(0o755)
        return LocalRunner(python=str(python))
    from runners.docker_runner import DockerRunner

    return DockerRunner({args.device: variant}, untrusted_layer="overlay")


def zoo_files(count: int) -> dict[str, str]:
    if not count:
        return {}
    from bench.shard_repos import model_modules

    return {"zoo/__init__.py": "", **model_modules(count)}


def zoo_targets(count: int) -> str:
    return json.dumps({"models": [f"zoo.{Path(p).stem}:examples" for p in zoo_files(count) if p != "zoo/__init__.py"]})


def spec_for(runner: Runner, work: Path, name: str, command: list[str], device: str, trust: str,
             env: dict[str, str] | None = None) -> RunSpec:
    checkout, out = work / "checkout", work / "out" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(out, ignore_errors=True)
    scope = CacheScope(work / "cache", "bench", trust, None if trust == TRUSTED else 1)
    targets = (checkout / "zoo" / "targets.json").read_text() if (checkout / "zoo" / "targets.json").exists() else "{}"
    job_env = {"COMPILE_CI_DEVICE": device, "COMPILE_CI_CHECKOUT": str(checkout), "COMPILE_CI_TARGETS": targets,
               "COMPILE_CI_OUTPUT_DIR": str(out), "PYTHONPATH": str(checkout), **(env or {})}
    return RunSpec(job_id=f"bench-startup-{name}", command=("sh", "-c", WRAP, "sh", *command), checkout_dir=checkout,
                   output_dir=out, timeout_s=1800, device=device, env=job_env, cache=scope,
                   suites_dir=ROOT / "suites")


def job_command(runner: Runner, work: Path, name: str, suite: str, select: str) -> list[str]:
    command = [runner.python, "-m", "suites.pytest_entry", "-v", "-p", "no:cacheprovider", "-p", "suites.plugin",
               "-p", "phase_clock", "-o", "junit_family=xunit1", f"--junitxml={work / 'out' / name / 'junit.xml'}",
               str(ROOT / "suites" / suite)]
    return [*command, "-k", select] if select else command


def timed(runner: Runner, spec: RunSpec) -> tuple[dict[str, float], str]:
    started = time.time()
    result = runner.run(spec)
    returned = time.time()
    log = spec.log_path.read_text(errors="replace")
    if result.exit_code != 0:
        raise SystemExit(f"{spec.job_id} failed (exit {result.exit_code}, {result.infra_error}):\n{log[-3000:]}")
    stamps = {"runner": started, "returned": returned}
    stamps.update({name.split(" ")[0] if name.startswith("collected") else name: float(at)
                   for name, at in STAMP.findall(log)})
    phases = {label: stamps[end] - stamps[begin] for label, begin, end in PHASES if begin in stamps and end in stamps}
    phases["job wall (runner.run)"] = returned - started
    return phases, log


def probe(runner: Runner, work: Path, name: str, device: str, trust: str) -> dict[str, Any]:
    command = ["sh", "-c", 'PROBE_T0=$(date +%s.%N) exec "$@"', "sh", runner.python,
               str(work / "checkout" / "startup_probe.py"), device]
    spec = spec_for(runner, work, name, command, device, trust)
    phases, log = timed(runner, spec)
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    result: dict[str, Any] = lines[0]
    result["steps"]["job wall (runner.run)"] = round(phases["job wall (runner.run)"], 3)
    gone = dict(STAMP.findall(log)).get("process gone")
    if gone is not None and len(lines) > 1:
        start = float(dict(STAMP.findall(log))["process starts"])
        result["steps"]["exit (finalization)"] = round(float(gone) - start - lines[1]["exit_started_at"], 3)
    return result


def median_of(rows: list[dict[str, float]]) -> dict[str, float]:
    keys = [k for k in rows[0] if all(k in r for r in rows)]
    return {k: round(statistics.median(r[k] for r in rows), 3) for k in keys}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runner", choices=("docker", "local"), default="docker")
    parser.add_argument("--image", action="append", default=[], help="a runner image (docker; repeat to compare)")
    parser.add_argument("--python", action="append", default=[], help="an interpreter (local; repeat to compare)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--suite", default="correctness")
    parser.add_argument("--select", default="test_inference and mlp", help="pytest -k for the one-test job")
    parser.add_argument("--zoo", type=int, default=0, metavar="N",
                        help="a checkout declaring N models of bench/shards.py's stand-in zoo (then e.g. --select "
                             "resnet_block: the tests a pull request changing one model runs)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--whole", action="store_true", help="also the whole suite, warm")
    parser.add_argument("--out", type=Path, default=None, help="a directory for job_startup.json")
    args = parser.parse_args()
    variants = (args.python or [sys.executable]) if args.runner == "local" else \
        (args.image or [f"compile-ci/runner-{args.device}:latest"])
    root = Path(tempfile.mkdtemp(prefix="compile-ci-bench-startup-"))
    results: dict[str, dict[str, list[Any]]] = {v: {"probe": [], "job": [], "whole": []} for v in variants}
    try:
        runners = {v: runner_for(args, v, root) for v in variants}
        for index, (variant, runner) in enumerate(runners.items()):
            work = root / f"v{index}"
            (work / "checkout").mkdir(parents=True)
            for helper in ("phase_clock.py", "startup_probe.py"):  # the job sees its checkout, not this one
                shutil.copy(ROOT / "bench" / helper, work / "checkout" / helper)
            for path, text in zoo_files(args.zoo).items():
                (work / "checkout" / path).parent.mkdir(parents=True, exist_ok=True)
                (work / "checkout" / path).write_text(text)
            if args.zoo:
                (work / "checkout" / "zoo" / "targets.json").write_text(zoo_targets(args.zoo))
            print(f"{variant}: warming its compile cache (a trusted push) ...", flush=True)
            probe(runner, work, "warm-probe", args.device, TRUSTED)
            select = "" if args.whole else args.select  # what the measured jobs will compile
            timed(runner, spec_for(runner, work, "warm-job", job_command(runner, work, "warm-job", args.suite, select),
                                   args.device, TRUSTED))
        for round_ in range(args.repeats):
            for index, (variant, runner) in enumerate(runners.items()):
                work = root / f"v{index}"
                results[variant]["probe"].append(probe(runner, work, f"probe{round_}", args.device, UNTRUSTED))
                command = job_command(runner, work, f"job{round_}", args.suite, args.select)
                results[variant]["job"].append(timed(runner, spec_for(runner, work, f"job{round_}", command,
                                                                      args.device, UNTRUSTED))[0])
                if args.whole:
                    command = job_command(runner, work, f"whole{round_}", args.suite, "")
                    results[variant]["whole"].append(timed(runner, spec_for(runner, work, f"whole{round_}", command,
                                                                            args.device, UNTRUSTED))[0])
        report = summarize(args, results)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "job_startup.json").write_text(json.dumps(report, indent=2))
        print(f"wrote {args.out / 'job_startup.json'}")
    return 0


def summarize(args: argparse.Namespace, results: dict[str, dict[str, list[Any]]]) -> dict[str, Any]:
    report: dict[str, Any] = {"host": {"cpus": os.cpu_count(), "machine": platform.machine(),
                                       "load_average": os.getloadavg()},
                              "runner": args.runner, "device": args.device, "suite": args.suite,
                              "select": args.select, "repeats": args.repeats, "variants": {}}
    for variant, rows in results.items():
        steps = median_of([r["steps"] for r in rows["probe"]])
        parts = median_of([r["first compile's parts"] for r in rows["probe"]])
        job = median_of(rows["job"])
        whole = median_of(rows["whole"]) if rows["whole"] else {}
        report["variants"][variant] = {"torch": rows["probe"][0]["torch"], "probe steps": steps,
                                       "first compile's parts": parts, "one-test job": job, "whole suite": whole,
                                       "compile_threads": rows["probe"][0]["compile_threads"]}
        print(f"\n== {variant} (torch {rows['probe'][0]['torch']}, {args.device}, medians of {args.repeats}) ==")
        print("step by step (probe):")
        for name, seconds in steps.items():
            print(f"  {name:<45} {seconds:8.3f}")
        print("  first compile's parts: " + ", ".join(f"{k} {v:g}" for k, v in parts.items()))
        for title, phases in (("the one-test job (" + args.select + ")", job), ("the whole suite", whole)):
            if phases:
                print(f"{title}, by phase:")
                for name, seconds in phases.items():
                    print(f"  {name:<45} {seconds:8.3f}")
    return report


if __name__ == "__main__":
    sys.exit(main())
