"""A model repository's suite job on 1, 2 and 4 cpu workers (sharding), and what running only what a pull request can
affect saves.

The repository: declared models in one module each (zoo/<name>.py, real architectures from compile-ci's own corpus,
suites/correctness/breadth_models.py, as a stand-in for a zoo of torchvision/timm/transformers classes), and
zoo/patches.py, which a compiler patch would live in. Through a private Redis, the GitHub emulator, two embedded
Celery workers (W threads for the device queue's jobs and shards, two for planning and reports, each worker with
its own event loop) and LocalRunner, with the built-in suite:

1. an unmeasured push that fills the trusted compile cache and records each test's duration;
2. for W in --workers: a push of a new commit on W cpu worker slots (COMPILE_CI_MAX_SHARDS=W, no minimum seconds
   per shard unless `--push-min-seconds` says otherwise; with recorded times, its counts are planned for the whole
   run, each shard's start taken as `--push-start-seconds`): the job's wall time, its shards' own times and each
   shard's overhead (its wall time minus the time of the tests it ran: a pytest, a torch import, the collection,
   the plugin);
3. two pull requests on the last count of worker slots, against the last push: one that changes one model's module
   (only that model's tests run; the others take the base's results) and one that changes zoo/patches.py
   (everything runs).

`--targets PATH` runs a declared-targets repository instead of the stand-in, e.g. tests/suites/models_repo (real
torchvision, timm and transformers classes; its [install] requirements come through the install phase as a job's do):
its files and its config's [install] and [targets], with [suites] set to this bench's suite on cpu. The first pull
request changes the module of its first declared target, the second a patches module the bench adds beside it.
The pull requests run with the deployment's COMPILE_CI_SHARD_MIN_SECONDS (`--pr-min-seconds`, default 30): their
shard count comes from the recorded time of the tests their change reaches (service/jobs/shard_plan.py).

`--suite` takes a comma-separated list or `all` (every built-in suite: one job each, the run's wall is its first job's
start to its last job's end); `--device cuda` runs them on the cuda queue (a GPU host: LocalRunner, its slots share the
host's GPUs); `--phases cold,warm`: cold runs each slot count on the repository's empty compile cache (the host's
precompiled-header seed stays, as on a deployment's host after its first job, unless `--wipe-host-seed`), warm after a
push filled it; every worker is measured once it has prepared the host (service/jobs/tasks.py); `--installed` runs a
--targets repository with what the interpreter has installed instead of its [install] requirements (a GPU host without
an index), and the versions found are recorded; `--out DIR` writes shards.json there.

Run from the repository root as a module: `python -m bench.shards [--models 6] [--suite correctness] [--workers 1,2,4]
[--targets tests/suites/models_repo] [--installed] [--device cpu] [--phases warm] [--out DIR]`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from celery.contrib.testing.worker import start_worker

from bench.base_compare import ROOT, settings_for
from bench.private_stack import private_stack
from bench.shard_figures import FULL_NAME, describe, seed_durations, versions
from bench.shard_repos import PATCH, Repository, declared_repository, stand_in_repository
from runners import warm_start
from service.celery_app import slots_by_queue
from service.config import Settings
from service.devkit.embedded_workers import own_loop_worker
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.sandbox.deliveries import pull_request_event, push_event, signed
from service.devkit.sandbox.sample_repo import commit_file
from service.devkit.sandbox.stack import INSTALLATION_ID
from service.jobs.tasks import create_worker_celery, wait_prepared
from service.store import Job, Store
from service.web.app import create_app

# The six suites a model repository runs ("all"); ops and distributed have benches of their own.
SIX = ("autograd", "correctness", "freezing", "fusion", "layout", "passes")


class Zoo:
    def __init__(self, settings: Settings, emulator: GitHubEmulator, repo: Path) -> None:
        self.settings, self.emulator, self.repo = settings, emulator, repo
        self.store = Store(settings.database_url)
        self.number = 0

    def deliver(self, settings: Settings, event: str, payload: dict[str, object]) -> None:
        headers, body = signed("bench-secret", event, payload)
        assert create_app(settings).test_client().post("/webhook", data=body, headers=headers).status_code == 202

    def push(self, settings: Settings, note: str) -> list[Job]:
        sha = commit_file(self.repo, "main", "notes.md", note + "\n", note)
        self.deliver(settings, "push", push_event(
            full_name=FULL_NAME, repo_id=4200, installation_id=INSTALLATION_ID,
            clone_url=f"https://github.com/{FULL_NAME}.git", branch="main", before="0" * 40, after=sha))
        return self.finished(sha)

    def pull_request(self, settings: Settings, path: str, text: str) -> list[Job]:
        self.number += 1
        base = subprocess.run(["git", "-C", str(self.repo), "rev-parse", "main"], check=True, capture_output=True,
                              text=True).stdout.strip()
        sha = commit_file(self.repo, f"pr{self.number}", path, text, f"change {path}")
        self.deliver(settings, "pull_request", pull_request_event(
            "opened", full_name=FULL_NAME, repo_id=4200, installation_id=INSTALLATION_ID,
            clone_url=f"https://github.com/{FULL_NAME}.git", number=self.number, head_sha=sha,
            head_ref=f"pr{self.number}", base_sha=base))
        return self.finished(sha)

    def finished(self, sha: str) -> list[Job]:
        """The run's jobs once every check run of the sha is completed (a pull request's base run, if one was
        needed, has no check runs: only the head's jobs are returned)."""
        while True:
            runs = [r for r in self.emulator.check_runs(FULL_NAME) if r["head_sha"] == sha]
            if runs and all(r["status"] == "completed" for r in runs):
                break
            time.sleep(0.5)
        (run,) = self.store.runs_at_sha(FULL_NAME, sha)
        return sorted(self.store.jobs_of(run.id), key=lambda job: job.suite)


@contextlib.contextmanager
def worker(settings: Settings, shards: int, queue: str, own_cpus: bool = True) -> Iterator[Settings]:
    """`shards` slots: a worker of that many threads for the device's queue, and one of its own for planning and
    reports (the github queue), each with its own event loop (service/devkit/embedded_workers.py), so a slot is a
    slot: no report thread takes a suite's job (before 2026-11-28 one worker held both, and "one slot" ran up to two
    jobs at once). `own_cpus`: each slot's job on its own part of the host's CPUs (COMPILE_CI_JOB_SLOTS, as `compile-ci
    worker --concurrency` sets it); else every job on all of them, as before 2026-11-29."""
    sized = dataclasses.replace(settings, max_shards=shards, job_slots=shards if own_cpus else 1)
    reports, device = (create_worker_celery(sized, suites_dir=ROOT / "suites") for _ in range(2))
    with start_worker(reports, pool="threads", concurrency=2, perform_ping_check=False, shutdown_timeout=120,
                      queues=["github"], hostname=f"bench-github-{uuid.uuid4().hex[:8]}@bench"), \
            own_loop_worker(device, pool="threads", concurrency=shards, perform_ping_check=False,
                            shutdown_timeout=120, queues=[queue], hostname=f"bench-{uuid.uuid4().hex[:8]}@bench"):
        while slots_by_queue(device, timeout=2.0).get(queue, 0) < shards:
            time.sleep(0.2)
        # As a deployment's long-running worker: what it makes for every job of the host when it starts (the
        # LocalRunner's ISA verdict, source keys, precompiled header and warm interpreters) is made before the first
        # push comes.
        waited = time.monotonic()
        if not wait_prepared(900) or not warm_start.wait_until_ready(300):  # its warm interpreters too
            print("the host's preparation did not end within 900 s", flush=True)
        if time.monotonic() - waited > 1.0:
            print(f"worker of {shards} slot(s): host prepared for jobs ({time.monotonic() - waited:.1f} s waited)",
                  flush=True)
        yield sized


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--suite", default="correctness", help="a suite, a comma-separated list, or all")
    parser.add_argument("--models", type=int, default=6)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--targets", type=Path, default=None, metavar="PATH",
                        help="a declared-targets repository instead of the stand-in models (e.g. "
                             "tests/suites/models_repo); --models then does not apply")
    parser.add_argument("--installed", action="store_true",
                        help="--targets without its [install] requirements: the interpreter's packages instead")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--phases", default="warm", help="cold, warm or cold,warm")
    parser.add_argument("--no-pull-requests", action="store_true", help="leave out the two pull requests")
    parser.add_argument("--pr-min-seconds", type=int, default=Settings.shard_min_seconds,
                        help="COMPILE_CI_SHARD_MIN_SECONDS of the pull requests (default: the deployment's default)")
    parser.add_argument("--push-min-seconds", type=int, default=0,
                        help="COMPILE_CI_SHARD_MIN_SECONDS of the pushes (default 0: one shard per slot, which shows "
                             "sharding itself; the deployment's default, 30, is what a user's push gets)")
    parser.add_argument("--push-start-seconds", type=int, default=Settings.shard_start_seconds,
                        help="COMPILE_CI_SHARD_START_SECONDS: one shard's start, as a push's run plans its counts "
                             "(service/jobs/run_plan.py; default: the deployment's)")
    parser.add_argument("--wipe-host-seed", action="store_true",
                        help="cold: the host's precompiled-header seed too (as before 2026-11-29: a host's first push)")
    parser.add_argument("--warm-up-slots", type=int, default=1, help="worker slots of the warm phase's warm-up push")
    parser.add_argument("--shared-cpus", dest="own_cpus", action="store_false",
                        help="every slot's job on all of the host's CPUs (before 2026-11-29) instead of its own part")
    parser.add_argument("--out", type=Path, default=None, help="a directory for shards.json")
    parser.add_argument("--durations-from", type=Path, default=None, metavar="SHARDS_JSON",
                        help="record each test's time from the first run of this many slots (`--durations-slots`) "
                             "in an earlier shards.json as a finished push, before the first measured push: its "
                             "split without measuring that run again")
    parser.add_argument("--durations-slots", type=int, default=1)
    args = parser.parse_args()
    suites = list(SIX) if args.suite == "all" else args.suite.split(",")
    declared = (declared_repository(args.targets, suites, args.device, args.installed) if args.targets
                else stand_in_repository(args.models, suites, args.device))
    report: dict[str, object] = {"host": {"cpus": os.cpu_count(), "machine": platform.machine(),
                                          "load_average": os.getloadavg()}, "versions": versions(),
                                 "suites": suites, "device": args.device, "targets": str(args.targets or "stand-in"),
                                 "installed": args.installed, "runs": []}
    print(f"versions: {report['versions']}; suites {', '.join(suites)} on {args.device}", flush=True)
    root = Path(tempfile.mkdtemp(prefix="compile-ci-bench-shards-"))
    with private_stack(root, FULL_NAME, INSTALLATION_ID) as (redis_url, emulator, private_key):
        base = settings_for(root, redis_url, emulator.url, private_key)
        settings = dataclasses.replace(base, shard_min_seconds=args.push_min_seconds,
                                       shard_start_seconds=args.push_start_seconds, devices=(args.device,))
        repo = root / "repos" / FULL_NAME
        repo.mkdir(parents=True)
        subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
        for path, text in declared.files.items():
            commit_file(repo, "main", path, text, f"add {path}")
        commit_file(repo, "main", declared.patches, PATCH.format("v1"), "patches")
        commit_file(repo, "main", ".compile-ci.toml", declared.config, "declare the zoo")
        zoo = Zoo(settings, emulator, repo)
        if args.durations_from is not None:
            seeded = seed_durations(zoo, args.durations_from, args.durations_slots, args.device)
            report["durations_from"] = {"file": str(args.durations_from), "slots": args.durations_slots,
                                        "tests": seeded}
            print(f"recorded {seeded} tests' times from {args.durations_from} ({args.durations_slots} slot run)")
        measure(args, zoo, settings, declared, report)
        assert emulator.errors == [], emulator.errors
    if args.out is not None:
        write_report(args.out, report)
        print(f"wrote {args.out / 'shards.json'}")
    return 0


def keep_logs(zoo: Zoo, jobs: list[Job], out: Path | None, nth: int) -> None:
    """Each shard's log and its times (log.txt, log.times) into `out`/logs/<nth run>/<suite>-<shard>/: where the
    phases of shards.json came from."""
    if out is None:
        return
    for job in jobs:
        attempt = zoo.settings.artifacts_dir / job.run_id / job.id / str(job.attempt)
        for shard in sorted((attempt / "shards").glob("*")) or [attempt]:
            dest = out / "logs" / str(nth) / (f"{job.suite}-{shard.name}" if shard != attempt else job.suite)
            dest.mkdir(parents=True, exist_ok=True)
            for name in ("log.txt", "log.times"):
                if (shard / name).is_file():
                    shutil.copyfile(shard / name, dest / name)


def write_report(out: Path | None, report: dict[str, object]) -> None:
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "shards.json").write_text(json.dumps(report, indent=2, default=str))


def measure(args: argparse.Namespace, zoo: Zoo, settings: Settings, declared: Repository,
            report: dict[str, object]) -> None:
    runs: list[dict[str, object]] = report["runs"]  # type: ignore[assignment]

    def record(kind: str, workers: int, jobs: list[Job]) -> float:
        line, figures = describe(zoo, jobs)
        runs.append({"kind": kind, "workers": workers, **figures})
        print(f"{kind}, {workers} {args.device} worker slot(s): {line}", flush=True)
        keep_logs(zoo, jobs, args.out, len(runs))
        write_report(args.out, report)  # as each run ends: a later failure keeps what was measured
        return float(figures["wall_s"])  # type: ignore[arg-type]

    slots = [int(w) for w in args.workers.split(",")]
    for phase in args.phases.split(","):
        if phase == "warm":
            with worker(settings, args.warm_up_slots, args.device, args.own_cpus) as one:
                record("warm-up push (fills the compile cache, records durations)", args.warm_up_slots,
                       zoo.push(one, "warm-up"))
        walls = {}
        for nth, count in enumerate(slots):
            if phase == "cold":  # every slot count starts from the repository's empty compile cache
                for entry in (settings.cache_dir.iterdir() if settings.cache_dir.is_dir() else ()):
                    if args.wipe_host_seed or entry.name != ".seeds":  # the host's, made once (runners/header_seed)
                        shutil.rmtree(entry, ignore_errors=True)
            if phase == "warm" and args.device == "cpu" and args.own_cpus and count != args.warm_up_slots:
                # inductor keys a CPU kernel on torch's thread count, which is the slot's share of the CPUs: a
                # worker of this many slots warms its own entries, as a deployment's does on its first push.
                with worker(settings, count, args.device, args.own_cpus) as sized:
                    record(f"warm-up push for {count} slots (unmeasured)", count, zoo.push(sized, f"warm {count}"))
            with worker(settings, count, args.device, args.own_cpus) as sized:
                walls[count] = record(f"push, {phase}", count, zoo.push(sized, f"{phase} on {count} workers ({nth})"))
        first = walls[slots[0]]
        ratios = {count: wall / first for count, wall in walls.items()}
        report[f"{phase} ratio to {slots[0]} slot(s)"] = ratios
        print(f"{phase}: " + ", ".join(f"{c} slots {walls[c]:.1f} s ({r:.2f} x)" for c, r in ratios.items()),
              flush=True)
    if args.no_pull_requests:
        return
    deployed = dataclasses.replace(settings, shard_min_seconds=args.pr_min_seconds)
    with worker(deployed, slots[-1], args.device, args.own_cpus) as sized:  # as many slots as the last push had
        name = declared.model
        model = record(f"pull request changing {name}", slots[-1],
                       zoo.pull_request(sized, name, declared.files[name] + "\n# a comment\n"))
        patch = record(f"pull request changing {declared.patches}", slots[-1],
                       zoo.pull_request(sized, declared.patches, PATCH.format("v2")))
    print(f"affected targets only: {model:.1f} s against {patch:.1f} s ({model / (patch or 1):.2f}x)", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
