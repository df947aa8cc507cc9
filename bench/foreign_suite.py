"""What compile-ci costs on someone else's suite: PyTorch's own compiler tests as a repository's `repo` suite.

    python bench/foreign_suite.py [--pairs 3] [--image compile-ci/runner-cpu:latest] [--suites DIR] [--before]

The foreign suite is built at run time, never committed: the test files of ../shared/seeds (PyTorch's layout,
custom-pass, freezing and memory-efficient-fusion tests; the AOT-autograd file does not parse and is left out) are
extracted into a temporary repository beside this folder's compatibility shim (conftest.py, inductor/). Each pair
runs, in the same runner image through the DockerRunner, bare pytest and compile-ci's repo-suite command (the
capture plugin: generated code, counters, metrics, progress), cold (empty compile cache) then warm (its own cache
again), interleaved: bare cold, compile-ci cold, bare warm, compile-ci warm. Prints per-test outcome differences
(must be none), each side's pytest summary, and the wall-time ratios. A job runs the suites installed in its image:
`--suites DIR` (e.g. this checkout's `suites/`) builds `compile-ci/runner-cpu:foreign-bench`, the `--image` with that
copy of the plugin, and runs bare and compile-ci on it; `--before` also runs compile-ci on `--image` itself (its
own plugin) in each pair, so an older and a newer plugin are measured under the same load.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runners.compile_cache import TRUSTED, CacheScope  # noqa: E402
from runners.docker_runner import DockerRunner  # noqa: E402
from runners.protocol import RunSpec  # noqa: E402
from service.github.checks import count_outcomes, summary_line  # noqa: E402
from service.jobs.outcome import read_attempt, read_json  # noqa: E402

SEEDS = ROOT.parent / "shared" / "seeds"
SHIM = Path(__file__).resolve().parent / "foreign_suite"
LEFT_OUT = ("test_aot_autograd.py",)  # an annotated copy that no longer parses


def build_repository(root: Path) -> Path:
    repo = root / "foreign"
    tests = repo / "tests"
    tests.mkdir(parents=True)
    for seed in sorted(SEEDS.glob("0*.txt")):
        text = seed.read_text()
        name = re.search(r"`[^`]*[\\/](test_\w+\.py)`", text)
        body = re.search(r"```[a-z]*\n(.*)\n```", text, re.S)
        if name and body and name.group(1) not in LEFT_OUT:
            (tests / name.group(1)).write_text(body.group(1))
    shutil.copy(SHIM / "conftest.py", tests / "conftest.py")
    shutil.copytree(SHIM / "inductor", repo / "inductor", ignore=shutil.ignore_patterns("__pycache__"))
    for path in [repo, *repo.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return repo


def command(repo: Path, out: Path, captured: bool) -> tuple[str, ...]:
    """The pipeline's repo-suite command (service/jobs/pipeline.py `_spec`), with or without the capture plugin."""
    plugin = ("-p", "suites.plugin") if captured else ()
    return ("python", "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin, "-o", "junit_family=xunit1",
            f"--junitxml={out / 'junit.xml'}", "--rootdir", str(repo), str(repo / "tests"))


def image_with(base: str, suites: Path, work: Path) -> str:
    """`base` with `suites` in place of its built-in suites (the bench's own tag; nothing else is rebuilt)."""
    context = work / "image"
    shutil.copytree(suites, context / "suites", ignore=shutil.ignore_patterns("__pycache__"))
    (context / "Dockerfile").write_text(f"FROM {base}\nCOPY suites /opt/compile-ci/suites\n")
    tag = "compile-ci/runner-cpu:foreign-bench"
    subprocess.run(["docker", "build", "-q", "-t", tag, str(context)], check=True, capture_output=True)
    return tag


def run_once(runner: DockerRunner, repo: Path, work: Path, name: str, captured: bool, cache: Path) -> dict[str, object]:
    out = work / name
    shutil.rmtree(out, ignore_errors=True)
    env = {"COMPILE_CI_DEVICE": "cpu", "COMPILE_CI_CHECKOUT": str(repo)}
    if captured:
        env["COMPILE_CI_OUTPUT_DIR"] = str(out)
    spec = RunSpec(job_id=f"foreign-{name}", command=command(repo, out, captured), checkout_dir=repo,
                   output_dir=out, timeout_s=3600, device="cpu", env=env,
                   cache=CacheScope(cache, "foreign", TRUSTED))  # a push's job: its repository's writable cache
    result = runner.run(spec)
    attempt = read_attempt(out, [str(repo)], repo)
    outcomes = {r.nodeid: r.outcome for r in attempt.records}
    print(f"  {name:<14} {result.duration_s:7.1f} s  exit {result.exit_code}  "
          f"{summary_line(count_outcomes(outcomes.values()))}", flush=True)
    return {"wall_s": result.duration_s, "outcomes": outcomes}


def captured(out: Path) -> str:
    """What the capture recorded, from the per-test metrics.json files (a plugin that records nothing is cheap)."""
    files = [read_json(path) for path in (out / "tests").glob("*/metrics.json")]
    code = sum(int(m.get("output_code_files", 0)) for m in files)  # type: ignore[call-overload]
    graphs = sum(1 for m in files if int(m.get("graphs", 0)) > 0)  # type: ignore[call-overload]
    breaks = sum(len(m.get("graph_break_reasons", [])) for m in files)  # type: ignore[arg-type]
    return (f"{len(files)} metrics.json, {code} output code files, {graphs} tests with graphs > 0, "
            f"{breaks} break reasons")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--image", default="compile-ci/runner-cpu:latest")
    parser.add_argument("--suites", type=Path, help="the suites package (plugin) to measure instead of the image's")
    parser.add_argument("--before", action="store_true", help="also run compile-ci with the image's own plugin")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="compile-ci-foreign-"))
    repo = build_repository(work)
    image = image_with(args.image, args.suites, work) if args.suites else args.image
    runners = {"bare": DockerRunner({"cpu": image}), "ci": DockerRunner({"cpu": image}),
               "before": DockerRunner({"cpu": args.image})}
    variants = ["ci", *(["before"] if args.before else [])]
    ratios: dict[str, dict[str, list[float]]] = {name: {"cold": [], "warm": []} for name in variants}
    differences = 0
    for pair in range(1, args.pairs + 1):
        print(f"pair {pair}:")
        sides = ["bare", *variants]
        sides = sides[(pair - 1) % len(sides):] + sides[:(pair - 1) % len(sides)]  # each side goes first in turn
        for phase in ("cold", "warm"):
            runs = {side: run_once(runners[side], repo, work, f"{side}-{phase}-{pair}", side != "bare",
                                   work / f"cache-{side}-{pair}") for side in sides}
            bare = runs["bare"]["outcomes"]
            for name in variants:
                ratios[name][phase].append(float(runs[name]["wall_s"]) / float(runs["bare"]["wall_s"]))  # type: ignore[arg-type]
                ours = runs[name]["outcomes"]
                diff = {k for k in set(bare) | set(ours) if bare.get(k) != ours.get(k)}  # type: ignore[union-attr, arg-type]
                differences += len(diff)
                for nodeid in sorted(diff):
                    print(f"    differs: {nodeid}: bare {bare.get(nodeid)}, {name} {ours.get(nodeid)}")  # type: ignore[union-attr]
                print(f"    {name}: {captured(work / f'{name}-{phase}-{pair}')}")
    summary = {name: {phase: round(statistics.median(v), 3) for phase, v in r.items()} for name, r in ratios.items()}
    for name, medians in summary.items():
        print(f"{name} / bare pytest (median of {args.pairs}): cold {medians['cold']}, warm {medians['warm']}; "
              f"per pair: cold {[round(x, 3) for x in ratios[name]['cold']]}, "
              f"warm {[round(x, 3) for x in ratios[name]['warm']]}")
    print(f"outcome differences: {differences}")
    print(json.dumps({"ratio": summary, "ratios": ratios, "differences": differences, "work": str(work)}))
    return 0 if differences == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
