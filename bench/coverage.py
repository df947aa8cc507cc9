"""Op-family coverage of the built-in suites: which of inductor's lowering and decomposition families the graphs
they compile go through, per suite and for all of them, against the denominator of ``suites/op_families.py``.

    python bench/coverage.py [--device cpu|cuda] [--suites correctness,fusion] [--ignore GLOB ...] [--out DIR]
                             [--show-uncovered] [--show-excluded]

Each suite runs as a job through the LocalRunner with the recording plugin (``-p suites.coverage``) and its own
empty compile cache, so no graph is served from a cache and every family it compiles is seen. ``--ignore`` passes
pytest's ``--ignore-glob`` (e.g. ``'*/test_breadth_*.py'`` measures the suites without the breadth corpus). Needs
only torch and pytest besides this repository, so it runs on a GPU host too. Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.suites import builtin_suites, counts  # noqa: E402
from runners.local import LocalRunner  # noqa: E402
from runners.protocol import RunSpec  # noqa: E402


def absolute_glob(glob: str) -> str:
    """pytest resolves a relative --ignore-glob against its working directory, which for a job is a scratch
    directory: '*/test_breadth_*.py' would then match nothing. A glob that does not start with '/' gets one, so
    its leading '*' matches any absolute path."""
    return glob if glob.startswith("/") else "/" + glob


def run_suite(suite: str, device: str, base: Path, ignore: list[str]) -> tuple[dict[str, object], dict]:
    out, cache = base / suite / "out", base / suite / "cache"
    for path in (out, cache):
        shutil.rmtree(path, ignore_errors=True)
    (cache / "tmp").mkdir(parents=True)
    command = (sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "suites.plugin",
               "-p", "suites.coverage", "-o", "junit_family=xunit1", f"--junitxml={out / 'junit.xml'}",
               *(f"--ignore-glob={absolute_glob(glob)}" for glob in ignore), str(ROOT / "suites" / suite))
    env = {"COMPILE_CI_DEVICE": device, "COMPILE_CI_OUTPUT_DIR": str(out), "PYTHONPATH": str(ROOT),
           "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"), "TRITON_CACHE_DIR": str(cache / "triton"),
           "TMPDIR": str(cache / "tmp")}
    spec = RunSpec(job_id=f"coverage-{suite}-{device}", command=command, checkout_dir=ROOT, output_dir=out,
                   timeout_s=1800, device=device, env=env)
    result = LocalRunner().run(spec)
    report_path = out / "coverage.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    figures = {"wall_s": round(result.duration_s, 1), "exit": result.exit_code, **counts(out / "junit.xml")}
    return figures, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--suites", default=",".join(builtin_suites()))
    parser.add_argument("--ignore", action="append", default=[], help="pytest --ignore-glob (repeatable)")
    parser.add_argument("--out", type=Path, default=None, help="keep artifacts here (default: a temp dir)")
    parser.add_argument("--show-uncovered", action="store_true", help="list the denominator's uncovered families")
    parser.add_argument("--show-excluded", action="store_true", help="list the excluded families with reasons")
    args = parser.parse_args()
    base = args.out.resolve() if args.out else Path(tempfile.mkdtemp(prefix="compile-ci-bench-coverage-"))
    covered: set[str] = set()
    last: dict = {}
    summary: dict[str, dict[str, object]] = {}
    for suite in args.suites.split(","):
        figures, report = run_suite(suite, args.device, base, args.ignore)
        mine = set(report.get("covered", []))
        covered |= mine
        last = report or last
        summary[suite] = {**figures, "covered": len(mine), "percent": report.get("percent"),
                          "cache_hits": report.get("cache_hits")}
        print(f"{suite:<12} {args.device:<5} {len(mine):>4} / {report.get('denominator', '?')} families "
              f"({report.get('percent', '?')} %)  {figures['wall_s']:>6.1f} s cold  passed {figures['passed']:>3}  "
              f"failed {figures['failed']:>2}  skipped {figures['skipped']:>3}", flush=True)
    denominator = int(last.get("denominator", 0))
    percent = round(100.0 * len(covered) / denominator, 1) if denominator else 0.0
    print(f"{'all':<12} {args.device:<5} {len(covered):>4} / {denominator} families ({percent} %) "
          f"of a universe of {last.get('universe', '?')}; torch {last.get('torch', '?')}")
    if args.show_excluded:
        for reason, families in last.get("excluded", {}).items():
            print(f"excluded ({len(families)}): {reason}\n    {' '.join(families)}")
    if args.show_uncovered:
        uncovered = sorted((set(last.get("covered", [])) | set(last.get("uncovered", []))) - covered)
        print(f"uncovered ({len(uncovered)}): {' '.join(uncovered)}")
    print(json.dumps({"device": args.device, "suites": summary, "covered": sorted(covered),
                      "denominator": denominator, "percent": percent,
                      "excluded": {reason: len(f) for reason, f in last.get("excluded", {}).items()}}))


if __name__ == "__main__":
    main()
