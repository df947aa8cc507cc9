"""Wall time of each built-in suite through the LocalRunner, cold and warm, with test counts.

    python bench/suites.py [--device cpu|cuda] [--suites correctness,freezing] [--targets REPO] [--out DIR]
                           [--phases cold,warm] [--plugin tests.suites.planted.NAME ...] [--select EXPR]
                           [--no-install]

"Cold" runs with an empty compile cache, "warm" reruns the suite with the cache the cold run filled (what a
rerun of the same code on the same host gets). Needs only torch and pytest besides this repository, so it
also runs on a GPU host. Prints a table and a JSON line with every figure.

A --targets repository with [install] requirements gets them as a job does: the service's install phase downloads
them once (per key, under ~/.cache/compile-ci-tests) and the job's install step puts them on the path. On a host
without an index (a GPU host offline), --no-install runs with what the interpreter already has.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runners.local import LocalRunner  # noqa: E402
from runners.protocol import RunSpec  # noqa: E402
from service.repo_config import OPT_IN_SUITES  # noqa: E402


def builtin_suites() -> list[str]:
    """The suites a repository gets by default (the opt-in OpInfo sweep has its own bench: bench/ops_sweep.py)."""
    return sorted(d.name for d in (ROOT / "suites").iterdir()
                  if d.is_dir() and any(d.glob("test_*.py")) and d.name not in OPT_IN_SUITES)


def counts(junit: Path) -> dict[str, int]:
    out = {"passed": 0, "failed": 0, "skipped": 0}
    if not junit.exists():
        return {**out, "failed": -1}
    for case in ET.parse(junit).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            out["failed"] += 1
        elif case.find("skipped") is not None:
            out["skipped"] += 1
        else:
            out["passed"] += 1
    return out


def failures(junit: Path) -> list[str]:
    if not junit.exists():
        return []
    return [f"{c.get('classname')}::{c.get('name')}" for c in ET.parse(junit).getroot().iter("testcase")
            if c.find("failure") is not None or c.find("error") is not None]


def _config(repo: Path) -> dict[str, dict[str, object]]:
    path = next(p for p in (repo / ".compile-ci.toml", repo / "compile-ci.toml") if p.exists())
    return tomllib.loads(path.read_text())


def targets_env(repo: Path | None) -> dict[str, str]:
    """COMPILE_CI_TARGETS and COMPILE_CI_CHECKOUT for a repository's [targets], as the service passes them."""
    if repo is None:
        return {}
    targets = _config(repo).get("targets", {})
    return {"COMPILE_CI_TARGETS": json.dumps(targets), "COMPILE_CI_CHECKOUT": str(repo.resolve())}


def install_deps(repo: Path | None, runner: LocalRunner) -> Path | None:
    """The install phase for the repository's [install] requirements, as a LocalRunner worker runs it."""
    requirements = tuple(_config(repo).get("install", {}).get("requirements", [])) if repo else ()
    if not requirements:
        return None
    # Imported here: the service's modules need its dependencies, which a GPU host running --no-install may lack.
    from service.config import Settings
    from service.jobs import install

    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "compile-ci-tests"
    start = time.monotonic()
    site = install.prepare(Settings("unused", "1", "unused", data_dir=cache), requirements,  # type: ignore[arg-type]
                           runner.cache_key("cpu"))
    print(f"install phase: {', '.join(requirements)} in {time.monotonic() - start:.1f} s -> {site}", flush=True)
    return site


def run_suite(suite: str, device: str, cache: Path, out: Path, extra: dict[str, str], select: str = "",
              deps: Path | None = None, plugins: tuple[str, ...] = (),
              prefix: tuple[str, ...] = ()) -> dict[str, object]:
    """One suite job through LocalRunner; `prefix` goes before the job's python (e.g. `taskset -c 0-3`)."""
    out.mkdir(parents=True, exist_ok=True)
    command: tuple[str, ...] = (
        *prefix, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "suites.plugin",
        *(arg for plugin in plugins for arg in ("-p", plugin)),
        "-o", "junit_family=xunit1", f"--junitxml={out / 'junit.xml'}", str(ROOT / "suites" / suite),
        *(("-k", select) if select else ()))
    if deps is not None:
        from service.jobs import install

        checkout = Path(extra.get("COMPILE_CI_CHECKOUT", ROOT))
        command = tuple(install.wrap(list(command), sys.executable, checkout, deps, False))
    # PYTHONPATH kept after ours: a host may add packages that way (timm on a GPU host without an index).
    pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {"COMPILE_CI_DEVICE": device, "COMPILE_CI_OUTPUT_DIR": str(out), "PYTHONPATH": pythonpath,
           "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"), "TRITON_CACHE_DIR": str(cache / "triton"),
           # inductor keeps precompiled headers under $TMPDIR/torchinductor_<user> whatever its cache dir says
           "TMPDIR": str(cache / "tmp"), **extra}
    (cache / "tmp").mkdir(parents=True, exist_ok=True)
    spec = RunSpec(job_id=f"bench-{suite}-{device}", command=command, checkout_dir=ROOT, output_dir=out,
                   timeout_s=1800, device=device, env=env, deps_dir=deps)
    result = LocalRunner().run(spec)
    return {"wall_s": round(result.duration_s, 1), "exit": result.exit_code, **counts(out / "junit.xml"),
            "failures": failures(out / "junit.xml")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--suites", default=",".join(builtin_suites()))
    parser.add_argument("--targets", type=Path, default=None,
                        help="a repository whose [targets] the suites also run (e.g. tests/suites/declared_repo)")
    parser.add_argument("--out", type=Path, default=None, help="keep artifacts here (default: a temp dir)")
    parser.add_argument("--cache", choices=("host", "suite"), default="host",
                        help="host: one cache per device shared by all suites, as a worker host keeps it (default); "
                             "suite: a fresh cache per suite")
    parser.add_argument("--phases", default="cold,warm", help="cold,warm (default) or one of them")
    parser.add_argument("--plugin", action="append", default=[],
                        help="a pytest plugin loaded into every suite, e.g. a planted bug: "
                             "tests.suites.planted.special_points (repeatable)")
    parser.add_argument("--select", default="", help="a pytest -k expression run in every suite, e.g. declared")
    parser.add_argument("--no-install", action="store_true",
                        help="skip the install phase of --targets' [install] requirements (they are installed)")
    args = parser.parse_args()
    base = args.out.resolve() if args.out else Path(tempfile.mkdtemp(prefix="compile-ci-bench-suites-"))
    suites = args.suites.split(",")
    extra = targets_env(args.targets)
    deps = None if args.no_install else install_deps(args.targets, LocalRunner())
    figures: dict[str, dict[str, object]] = {suite: {} for suite in suites}
    # Cold: every suite once on an empty cache (a fresh worker host); warm: every suite again (a rerun). --phases
    # warm alone reuses what an earlier run left under --out.
    phases = args.phases.split(",")
    if "cold" in phases:
        shutil.rmtree(base / "cache", ignore_errors=True)  # cold means cold, even when --out is reused
    for phase in phases:
        for suite in suites:
            cache = base / "cache" / (suite if args.cache == "suite" else "host")
            shutil.rmtree(base / suite / phase, ignore_errors=True)
            figures[suite][phase] = result = run_suite(suite, args.device, cache, base / suite / phase, extra,
                                                       args.select, deps, tuple(args.plugin))
            print(f"{suite:<12} {args.device:<5} {phase:<4} {result['wall_s']:>6.1f} s  passed {result['passed']:>3}  "
                  f"failed {result['failed']:>2}  skipped {result['skipped']:>3}", flush=True)
            for name in result["failures"]:  # type: ignore[union-attr]
                print(f"    FAILED {name}")
    totals = {phase: round(sum(f[phase]["wall_s"] for f in figures.values()), 1) for phase in phases}  # type: ignore[misc]
    print(f"{'all':<12} {args.device:<5} " + "  ".join(f"{phase} {total:>6.1f} s" for phase, total in totals.items()))
    print(json.dumps({"device": args.device, "suites": figures, **{f"total_{p}_s": t for p, t in totals.items()}}))


if __name__ == "__main__":
    main()
