"""The `compile-ci` command: sandbox, web and its front, worker, beat, image builds, config checks and repros."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from service.celery_app import QUEUES

if TYPE_CHECKING:
    from service.config import Settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="compile-ci", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sandbox = sub.add_parser("sandbox", help="run two sample pull requests end to end against the GitHub emulator")
    sandbox.add_argument("--dir", type=Path, help="working directory (default: a new temporary one)")
    sandbox.add_argument("--keep-running", action="store_true", help="keep the services up to browse the pages")
    sandbox.add_argument("--devices", default="cpu", choices=("cpu", "cpu,cuda"),
                         help="workers to start: cpu, or cpu,cuda on a GPU host (default: %(default)s)")
    sandbox.add_argument("--cuda-workers", type=int, default=1,
                         help="cuda workers, each pinned to one GPU when more than one (default: %(default)s)")
    sandbox.add_argument("--declared", action="store_true",
                         help="also the declared-targets sample through all six suites (on cuda with cpu,cuda)")
    sandbox.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for the check runs")
    web = sub.add_parser("web", help="serve the webhook and the pages with gunicorn")
    web.add_argument("--bind", default="0.0.0.0:8000", help="HOST:PORT to listen on (default: %(default)s)")
    web.add_argument("--workers", type=int, default=4, help="gunicorn worker processes (default: %(default)s)")
    web.add_argument("--threads", type=int, default=32, help="threads per worker (gthread; 0: sync workers)")
    front = sub.add_parser("front", help="serve the web through nginx, which buffers slow clients (docs/operating.md)")
    front.add_argument("--listen", default="0.0.0.0:8080", help="HOST:PORT to listen on (default: %(default)s)")
    front.add_argument("--upstream", default="127.0.0.1:8000", help="gunicorn's HOST:PORT (default: %(default)s)")
    front.add_argument("--workers", type=int, default=1, help="nginx worker processes (default: %(default)s)")
    worker = sub.add_parser("worker", help="run a Celery worker")
    worker.add_argument("--queues", default="cpu,github", help=f"comma-separated, from {', '.join(QUEUES)}")
    worker.add_argument("--concurrency", type=int, default=1)
    worker.add_argument("--beat", action="store_true", help="also run the reaper's schedule (one such worker only)")
    worker.add_argument("--torch", default="", metavar="VERSION",
                        help="the torch version of COMPILE_CI_TORCH_VERSIONS this worker's runner holds; its cpu/cuda "
                             "queues become that version's (cpu-torch2.14) (default: the deployment's default)")
    sub.add_parser("beat", help="send the periodic reaper task (run exactly one per deployment)")
    images = sub.add_parser("images", help="build the runner and service images")
    images_sub = images.add_subparsers(dest="images_command", required=True)
    build = images_sub.add_parser("build", help="build images (default: the cpu runner and the service)")
    build.add_argument("names", nargs="*", metavar="IMAGE", help="cpu, cuda, service")
    build.add_argument("--local-base", action="store_true",
                       help="no registry: debootstrap a Debian base from the host's apt mirror, pip offline")
    build.add_argument("--rebuild-base", action="store_true", help="rebuild the local base even if it exists")
    build.add_argument("--if-changed", action="store_true",
                       help="skip an image whose Dockerfile, sources and requirements are unchanged")
    build.add_argument("--torch", default="", metavar="VERSION",
                       help="runner images on this torch from the package index (2.14.1, 2.15.0rc1, or 2.14.x: the "
                            "newest 2.14), tagged torch2.14 (default: the pinned torch, tagged latest)")
    check = sub.add_parser("check-config", help="validate a .compile-ci.toml the way the service will")
    check.add_argument("path", type=Path, nargs="?", default=Path(".compile-ci.toml"),
                       help="the file to check (default: %(default)s in the current directory)")
    repro = sub.add_parser("repro", help="rerun a failed test of a job locally, from a clone of the repository")
    repro.add_argument("job", help="the job's (or the failed test's) page URL, or a job id with --url")
    repro.add_argument("test", nargs="?", help="the failed test (part of its name); default: the page's, or the first")
    repro.add_argument("--clone", type=Path, default=Path("."), help="the repository clone (default: here)")
    repro.add_argument("--url", default=os.environ.get("COMPILE_CI_PUBLIC_URL", ""), help="the service's address")
    repro.add_argument("--no-checkout", action="store_true",
                       help="only check that the clone is at the job's commit (default: check it out if it is not)")
    repro.add_argument("--any-commit", action="store_true",
                       help="run against the clone's files as they are, whatever commit (or no git) they are")
    repro.add_argument("--output-code", action="store_true",
                       help="also print inductor's generated code (TORCH_LOGS=output_code; the job page has it)")
    repro.add_argument("--bisect", action="store_true",
                       help="bisect the test when it fails, as the job did (torch's compiler bisector, judged by the "
                            "test itself; the test page shows the job's bisection)")
    args = parser.parse_args(argv)

    if args.command == "sandbox":
        from service.devkit.sandbox.main import run_sandbox

        return run_sandbox(args.dir, keep_running=args.keep_running, timeout_s=args.timeout, devices=args.devices,
                           cuda_workers=args.cuda_workers, declared=args.declared)
    if args.command == "web":
        _validated_settings()
        from service.web.serving import gunicorn_command

        os.execvp(sys.executable, gunicorn_command(args.bind, args.workers, args.threads))
    if args.command == "front":
        from service.web.front import front_command

        command = front_command(args.listen, args.upstream, args.workers)
        os.execv(command[0], command)
    if args.command == "worker":
        settings = _validated_settings()
        from runners.gpus import host_gpu_count
        from service.planning.plan import worker_queues_problem

        if problem := worker_queues_problem(args.queues.split(","), settings.gpus, host_gpu_count):
            parser.error(problem)
        queues = _worker_queues(settings, args.queues.split(","), args.torch)
        args.queues = ",".join(queues)
        if queues != ["github"]:  # each job it runs at once on its own part of its CPUs (runners/cpu_shares.py)
            os.environ.setdefault("COMPILE_CI_JOB_SLOTS", str(args.concurrency))
        pool = ["-P", "threads"] if queues == ["github"] else []
        beat = ["-B"] if args.beat else []
        os.execvp(sys.executable, [sys.executable, "-m", "celery", "-A", "service.worker", "worker", "-Q",
                                   args.queues, "-c", str(args.concurrency), *pool, *beat, "--loglevel", "INFO"])
    if args.command == "beat":
        settings = _validated_settings()
        # The schedule's state file goes to the data directory: the image's working directory is read-only.
        try:
            settings.data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            sys.exit(f"compile-ci beat: cannot create the data directory {settings.data_dir} (COMPILE_CI_DATA_DIR): "
                     f"{exc.strerror}")
        schedule = str(settings.data_dir / "celerybeat-schedule")
        os.execvp(sys.executable, [sys.executable, "-m", "celery", "-A", "service.worker", "beat", "-s", schedule,
                                   "--loglevel", "INFO"])
    if args.command == "repro":
        from service.repro import ReproError, run_repro

        try:
            return run_repro(args.job, args.test, args.clone, args.url, checkout=not args.no_checkout,
                             any_commit=args.any_commit, output_code=args.output_code, bisect=args.bisect)
        except ReproError as exc:
            print(f"compile-ci repro: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            return 130
    if args.command == "check-config":
        return _check_config(args.path)
    if args.command == "images":
        return _build_images(args.names or ["cpu", "service"], args.local_base, args.rebuild_base,
                             args.if_changed, args.torch)
    return 2


def _validated_settings() -> Settings:
    from service.config import ConfigError, Settings

    try:
        return Settings.from_env()
    except ConfigError as exc:
        sys.exit(str(exc))


def _worker_queues(settings: Settings, queues: list[str], torch: str) -> list[str]:
    """`--torch 2.14`: the device queues of that version, and COMPILE_CI_WORKER_TORCH for the worker's runner."""
    from service.torch_versions import job_torch, queue_for

    if not torch:
        return queues
    if torch not in [v.name for v in settings.torch_versions]:
        sys.exit(f"compile-ci worker: --torch {torch} is not one of COMPILE_CI_TORCH_VERSIONS "
                 f"({', '.join(v.name for v in settings.torch_versions)})")
    os.environ["COMPILE_CI_WORKER_TORCH"] = torch
    lane = job_torch(settings.torch_versions, torch)
    return [queue_for(q, lane) if q in ("cpu", "cuda", "cuda2") else q for q in queues]


def _build_images(names: list[str], local_base: bool, rebuild_base: bool, if_changed: bool, torch: str = "") -> int:
    from runners.images import ImageBuildError, build_images, recipes

    table = recipes()
    unknown = sorted(set(names) - set(table))
    if unknown:
        print(f"compile-ci images build: unknown image {', '.join(unknown)} (expected {', '.join(table)})",
              file=sys.stderr)
        return 2
    try:
        timings = build_images(names, local_base, rebuild_base, if_changed, torch)
    except ImageBuildError as exc:
        print(f"compile-ci images build: {exc}", file=sys.stderr)
        return 1
    if not timings:
        print("compile-ci images build: every image is up to date")
    for tag, seconds in timings.items():
        print(f"{tag}: built in {seconds:.0f} s")
    return 0


def _check_config(path: Path) -> int:
    import suites
    from service.planning.plan import builtin_suites
    from service.repo_config import parse_repo_config

    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        # A missing file is the default config for the service, but here it is most likely a typo.
        reason = "no such file" if isinstance(exc, FileNotFoundError) else (
            "is a directory" if path.is_dir() else exc.__class__.__name__)
        print(f"compile-ci check-config: {path}: {reason}", file=sys.stderr)
        return 2
    parsed = parse_repo_config(text, builtin_suites(Path(suites.__file__).parent))
    if isinstance(parsed, list):
        for problem in parsed:
            print(f"{path}:{problem.render().split(':', 1)[1]}", file=sys.stderr)
        return 1
    print(f"{path}: OK")
    print(f"  suites:  {', '.join(parsed.suites)}")
    print(f"  devices: {', '.join(parsed.devices)}")
    print(f"  timeout: {parsed.timeout_minutes} minutes per job")
    print(f"  torch:   {', '.join(parsed.torch) or 'the deployment default'}"
          + ("" if parsed.canary else " (no canary: [canary] enabled = false)"))
    if parsed.requirements:
        print(f"  install: {', '.join(parsed.requirements)}")
    print(f"  install the repository's own package: {'yes' if parsed.install_package else 'no'}")
    if parsed.repo_tests:
        print(f"  repo tests: {', '.join(parsed.repo_tests)}")
    for kind, specs in parsed.targets.items():
        print(f"  targets.{kind}: {', '.join(specs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
