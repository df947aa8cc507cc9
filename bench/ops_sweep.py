"""The OpInfo sweep (`ops` suite): the full sweep's wall time cold and warm, sharded over processes, what it covers,
and an aimed run for one changed lowering.

    python bench/ops_sweep.py [--device cpu|cuda] [--shards N] [--phases cold,warm] [--aimed-lowering KEY]
                              [--skip-full] [--skip-aimed] [--part K/N] [--select EXPR] [--out DIR]

Full sweep: ``COMPILE_CI_OPS_SCOPE=all``, N pytest processes at once (``COMPILE_CI_OPS_SHARD=k/N``) sharing one
compile cache, as one worker host's jobs would; "cold" starts from an empty cache (inductor's, the sweep's route
cache and the precompiled headers under TMPDIR), "warm" reruns on what cold left. Coverage comes from the cold run
(``coverage.json``; a cache hit hides a graph's families). Aimed: a plugin (``bench/ops_patch.py``) replaces the
lowering KEY (default ``aten.reciprocal.default``) with one that computes the same thing, so the suite aims at the
ops routed through it; cold on its own empty cache, then warm. Needs only torch and pytest besides this repository,
so it runs on a GPU host too. Prints a table, the unexpected failures and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def sweep(out: Path, cache: Path, device: str, shards: int, extra: dict[str, str], plugins: list[str],
          select: str | None, only: int | None = None) -> dict[str, object]:
    """One sweep of ``shards`` processes at once; their JUnit files and coverage reports read together. ``only``:
    just that one of the ``shards`` (a sample of the sweep, for an estimate where the whole is too long)."""
    (cache / "tmp").mkdir(parents=True, exist_ok=True)
    processes = []
    started = time.monotonic()
    indices = [only] if only else list(range(1, shards + 1))
    for index in indices:
        shard_out = out / f"shard-{index}"
        shutil.rmtree(shard_out, ignore_errors=True)
        shard_out.mkdir(parents=True)
        env = {**os.environ, "COMPILE_CI_DEVICE": device, "COMPILE_CI_OUTPUT_DIR": str(shard_out),
               "PYTHONPATH": str(ROOT), "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
               "TRITON_CACHE_DIR": str(cache / "triton"), "TMPDIR": str(cache / "tmp"),
               "COMPILE_CI_OPS_SHARD": f"{index}/{shards}", **extra}
        command = [sys.executable, "-m", "suites.pytest_entry", "-q", "-p", "no:cacheprovider", "-p", "suites.plugin",
                   "-o", "junit_family=xunit1", f"--junitxml={shard_out / 'junit.xml'}", str(ROOT / "suites" / "ops")]
        for plugin in plugins:
            command += ["-p", plugin]
        command += ["-k", select] if select else []
        log = (shard_out / "pytest.log").open("w")
        processes.append((subprocess.Popen(command, cwd=shard_out, env=env, stdout=log, stderr=subprocess.STDOUT),
                          log))
    for process, log in processes:
        process.wait()
        log.close()
    figures = summarise([out / f"shard-{i}" for i in indices])
    figures["wall_s"] = round(time.monotonic() - started, 1)
    figures["exit_codes"] = [process.returncode for process, _log in processes]
    return figures


def summarise(directories: list[Path]) -> dict[str, object]:
    outcome = {"passed": 0, "failed": 0, "xfailed": 0, "skipped": 0}
    samples = judged = graphs = 0
    ops: set[str] = set()
    failures: list[str] = []
    plan_s: list[float] = []
    covered: set[str] = set()
    denominator = 0
    for directory in directories:
        junit = directory / "junit.xml"
        for case in ET.parse(junit).getroot().iter("testcase") if junit.exists() else ():
            name = case.get("name", "")
            properties = {p.get("name"): p.get("value") for p in case.iter("property")}
            if "plan_seconds" in properties:
                plan_s.append(float(properties["plan_seconds"] or 0))
            kind = _outcome(case)
            outcome[kind] += 1
            if kind == "failed":
                problem = case.find("failure") if case.find("failure") is not None else case.find("error")
                failures.append(f"{name}: {(problem.get('message', '') if problem is not None else '')[:400]}")
            if name.startswith("test_op_matches_eager[") and kind != "skipped":
                ops.add(name.removeprefix("test_op_matches_eager[").rsplit("-", 1)[0])
                samples += int(properties.get("samples") or 0)
                judged += int(properties.get("samples_judged") or 0)
                graphs += int(properties.get("graphs") or 0)
        report = directory / "coverage.json"
        if report.exists():
            data = json.loads(report.read_text())
            covered |= set(data.get("covered", []))
            denominator = int(data.get("denominator", 0))
    return {**outcome, "ops": len(ops), "samples": samples, "samples_judged": judged, "graphs": graphs,
            "families_covered": len(covered), "family_denominator": denominator, "plan_s": plan_s,
            "failures": failures, "covered": sorted(covered)}


def _outcome(case: ET.Element) -> str:
    if case.find("failure") is not None or case.find("error") is not None:
        return "failed"
    skipped = case.find("skipped")
    if skipped is None:
        return "passed"
    return "xfailed" if skipped.get("type") == "pytest.xfail" else "skipped"


def report(label: str, figures: dict[str, object]) -> None:
    print(f"{label:<14} {figures['wall_s']:>8.1f} s  ops {figures['ops']:>4}  passed {figures['passed']:>4}  "
          f"failed {figures['failed']:>3}  xfailed {figures['xfailed']:>3}  skipped {figures['skipped']:>3}  "
          f"samples judged {figures['samples_judged']:>6}  graphs {figures['graphs']:>5}  "
          f"families {figures['families_covered']}/{figures['family_denominator']}", flush=True)
    for failure in figures["failures"]:  # type: ignore[attr-defined]
        print(f"    FAILED {failure}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--shards", type=int, default=1, help="processes of the full sweep at once (default 1)")
    parser.add_argument("--phases", default="cold,warm")
    parser.add_argument("--aimed-lowering", default="aten.reciprocal.default")
    parser.add_argument("--skip-full", action="store_true", help="only the aimed run")
    parser.add_argument("--skip-aimed", action="store_true", help="only the full sweep")
    parser.add_argument("--part", default=None, help="K/N: only the K-th of N shards of the full sweep (a sample)")
    parser.add_argument("--select", default=None, help="a pytest -k expression for the full sweep (a partial sweep)")
    parser.add_argument("--out", type=Path, default=None, help="keep artifacts here (default: a temp dir)")
    args = parser.parse_args()
    base = args.out.resolve() if args.out else Path(tempfile.mkdtemp(prefix="compile-ci-bench-ops-"))
    phases = args.phases.split(",")
    results: dict[str, dict[str, object]] = {}
    kinds = [k for k in ("full", "aimed") if not (k == "full" and args.skip_full or k == "aimed" and args.skip_aimed)]
    for kind in kinds:
        cache = base / kind / "cache"
        shutil.rmtree(cache, ignore_errors=True)  # cold means cold, even when --out is reused
        for phase in phases:
            if kind == "full":
                shards, only = (int(args.part.split("/")[1]), int(args.part.split("/")[0])) if args.part else (
                    args.shards, None)
                figures = sweep(base / kind / phase, cache, args.device, shards, {"COMPILE_CI_OPS_SCOPE": "all"},
                                [], args.select, only)
            else:
                figures = sweep(base / kind / phase, cache, args.device, 1,
                                {"COMPILE_CI_BENCH_LOWERING": args.aimed_lowering}, ["bench.ops_patch"], None)
            results[f"{kind}_{phase}"] = figures
            report(f"{kind} {phase}", figures)
    print(json.dumps({"device": args.device, "shards": args.shards, "aimed_lowering": args.aimed_lowering,
                      **{k: {key: v for key, v in f.items() if key != "covered"} for k, f in results.items()},
                      "covered": results.get("full_cold", {}).get("covered", [])}))


if __name__ == "__main__":
    main()
