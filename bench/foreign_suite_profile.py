"""Where the capture plugin's time goes on the foreign suite: cProfile inside the runner image, cold and warm.

    python bench/foreign_suite_profile.py [--image compile-ci/runner-cpu:latest] [--suites DIR] [--top 25]

Builds the same foreign repository as bench/foreign_suite.py and runs compile-ci's repo-suite command under
`python -m cProfile` through the DockerRunner, cold then warm (one cache), with the image's own capture plugin or,
with `--suites DIR`, that copy built into the image as bench/foreign_suite.py does.
Prints, per run, the cumulative time of every function defined in the suites package (the plugin and the harness's
CompileCapture) next to the whole run's, so the plugin's share is read from one process, free of the noise between
runs that the paired bench has to average away. cProfile slows Python code (dynamo's tracing most), so shares are
upper bounds; the paired bench gives the real ratio.
"""

from __future__ import annotations

import argparse
import pstats
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.foreign_suite import build_repository, command, image_with  # noqa: E402
from runners.compile_cache import TRUSTED, CacheScope  # noqa: E402
from runners.docker_runner import DockerRunner  # noqa: E402
from runners.protocol import RunSpec  # noqa: E402


def profiled_run(runner: DockerRunner, repo: Path, out: Path, cache: Path) -> Path:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    pytest_args = command(repo, out, True)[3:]  # drop "python -m pytest"
    profile = out / "profile.pstats"
    spec = RunSpec(job_id=f"foreign-profile-{out.name}",
                   command=("python", "-m", "cProfile", "-o", str(profile), "-m", "pytest", *pytest_args),
                   checkout_dir=repo, output_dir=out, timeout_s=3600, device="cpu",
                   env={"COMPILE_CI_DEVICE": "cpu", "COMPILE_CI_CHECKOUT": str(repo),
                        "COMPILE_CI_OUTPUT_DIR": str(out)},
                   cache=CacheScope(cache, "foreign", TRUSTED))
    result = runner.run(spec)
    print(f"{out.name}: {result.duration_s:.1f} s wall, exit {result.exit_code}")
    return profile


def report(profile: Path, top: int) -> None:
    stats = pstats.Stats(str(profile))
    raw = stats.stats  # type: ignore[attr-defined]
    total = max(ct for (_, _, _), (_, _, _, ct, _) in raw.items())
    print(f"  whole run (profiled): {total:.2f} s")
    ours = [(ct, tt, nc, f"{Path(file).name}:{line} {name}") for (file, line, name), (_, nc, tt, ct, _) in raw.items()
            if "/compile-ci/suites/" in file]
    for ct, tt, nc, where in sorted(ours, reverse=True)[:top]:
        print(f"  {ct:8.3f} s cum {tt:8.3f} s own {nc:6d} calls  {where}  ({100 * ct / total:.2f} %)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image", default="compile-ci/runner-cpu:latest")
    parser.add_argument("--suites", type=Path, help="the suites package (plugin) to profile instead of the image's")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="compile-ci-foreign-profile-"))
    repo = build_repository(work)
    runner = DockerRunner({"cpu": image_with(args.image, args.suites, work) if args.suites else args.image})
    for phase in ("cold", "warm"):
        report(profiled_run(runner, repo, work / phase, work / "cache"), args.top)
    print(f"profiles kept under {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
