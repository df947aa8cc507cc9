"""What bisecting a job's failures costs (issue 41): a suite with a planted bug run twice through the LocalRunner,
without bisection and with it, and each failing test's bisection (its answer, runs and seconds).

    python bench/bisect_cost.py [--device cpu|cuda] [--targets tests/suites/models_repo] [--suite correctness]
                                [--select test_declared_model] [--plant batch_norm_unbiased_variance]
                                [--seconds 3600] [--out DIR] [--no-install]

The default is the real-model sample (torchvision's ResNet, timm's EfficientNet, transformers' GPT-2, each with
BatchNorm or LayerNorm) under Bessel's correction planted in inductor's var_mean decomposition: every declared model
fails, and each is bisected. Both runs share one compile cache (the second is warm for the tests, so the walls'
difference understates what bisecting cost; a bisection compiles uncached whatever the cache holds): the figure is
the bisections' own seconds. Prints a line per bisection and a JSON line with every figure.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
_spec = importlib.util.spec_from_file_location("bench_suites", ROOT / "bench" / "suites.py")
bench_suites = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(bench_suites)  # type: ignore[union-attr]

from runners.local import LocalRunner  # noqa: E402


def bisections(out: Path) -> list[dict[str, object]]:
    return [json.loads(path.read_text()) for path in sorted((out / "tests").glob("*/bisect.json"))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--targets", type=Path, default=ROOT / "tests" / "suites" / "models_repo")
    parser.add_argument("--suite", default="correctness")
    parser.add_argument("--select", default="test_declared_model", help="a pytest -k expression")
    parser.add_argument("--plant", default="batch_norm_unbiased_variance", help="a module of tests.suites.planted")
    parser.add_argument("--seconds", type=int, default=3600, help="COMPILE_CI_BISECT_SECONDS for the second run")
    parser.add_argument("--out", type=Path, default=None, help="keep artifacts here (default: a temp dir)")
    parser.add_argument("--no-install", action="store_true",
                        help="skip the install phase of --targets' [install] requirements (they are installed)")
    args = parser.parse_args()
    base = args.out.resolve() if args.out else Path(tempfile.mkdtemp(prefix="compile-ci-bench-bisect-"))
    extra = bench_suites.targets_env(args.targets)
    deps = None if args.no_install else bench_suites.install_deps(args.targets, LocalRunner())
    plugins = (f"tests.suites.planted.{args.plant}",)
    figures: dict[str, object] = {"device": args.device, "suite": args.suite, "plant": args.plant}
    for phase, seconds in (("without", 0), ("with", args.seconds)):
        out = base / phase
        result = bench_suites.run_suite(args.suite, args.device, base / "cache", out,
                                        {**extra, "COMPILE_CI_BISECT_SECONDS": str(seconds)}, args.select, deps,
                                        plugins)
        figures[f"{phase}_bisection"] = {k: result[k] for k in ("wall_s", "passed", "failed", "skipped")}
        print(f"{args.suite} {args.device} {phase} bisection: {result['wall_s']} s, {result['failed']} failed",
              flush=True)
    found = bisections(base / "with")
    for data in found:
        culprit = " · ".join(str(data[k]) for k in ("backend", "subsystem") if data.get(k))
        names = f" ({', '.join(map(str, data['names']))})" if data.get("names") else ""
        print(f"  {data['nodeid']}: {data['status']} {culprit} #{data.get('number')}{names} "
              f"{data.get('place') or ''} {data.get('where') or ''} — {data['runs']} runs, {data['seconds']} s")
    # The bisections' own seconds, not the difference of the walls: the second run's tests find a warm cache.
    spent = sum(float(str(d["seconds"])) for d in found)
    print(f"{len(found)} bisection(s) took {spent:.1f} s in all")
    print(json.dumps({**figures, "bisection_s": round(spent, 1), "bisections": [
        {k: d.get(k) for k in ("nodeid", "status", "backend", "subsystem", "number", "names", "place", "where",
                               "runs", "seconds")} for d in found]}))


if __name__ == "__main__":
    main()
