"""The fault campaign: kill workers, Redis and PostgreSQL, make GitHub and the database fail, and count what was
lost, stuck or duplicated.

    python bench/fault_campaign.py [--prs 16] [--worker-kills 3] [--postgres]

Runs the sandbox stack with its default settings (gunicorn, Redis, the github and cpu Celery workers, one beat for
the reaper, the DockerRunner where an engine answers, else LocalRunner) and the sample repository, then:
  1. GitHub faults: the first check-run create is applied and answered 502, a PATCH is rate limited (403, Retry-After).
  2. Redis kill -9 while the first half of the pull requests' jobs are queued, then a restart (no persistence: the
     queue, the leases and the delivery claims are gone); recovery = restart -> every run that was being planned
     is planned and every job that was queued has its message back (or has started).
  3. The second half of the pull requests, then worker kills: `--worker-kills` times, while a suite job runs (a
     different job each time), the cpu worker is SIGKILLed with its pool and started again; recovery = kill -> the
     same job running again as a new attempt.
  4. With --postgres (the stack on a private PostgreSQL 15, fsync on): the server killed (kill -9, restarted after
     10 s), made read-only, and its disk full (the database on a 64 MB tmpfs, filled; root only), each for 10 s
     while a job runs and a pull request is opened; refused deliveries must be 503 + Retry-After + JSON and are
     redelivered after the fault (bench/postgres_faults.py).
Then it waits for every check run to complete and judges what should reach GitHub: the jobs of the pull requests'
runs (a base run's jobs are internal and have no check runs by design). It prints jobs lost (no completed check run),
stuck (a check run or a job not completed), duplicated (two check runs for one job generation), orphaned job
containers, deliveries refused improperly, and the recovery times. Loopback only; bounded in time; stops everything
it started. Exit status 1 when anything was lost, stuck, duplicated or orphaned.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.postgres_faults import HOLD_S, Delivery, run_faults  # noqa: E402
from bench.supervisor import Supervisor  # noqa: E402
from runners.docker_container import DEPLOYMENT_LABEL, LABEL  # noqa: E402
from service.celery_app import QUEUES, RUN_JOB  # noqa: E402
from service.devkit.postgres import LocalPostgres  # noqa: E402
from service.devkit.sandbox.deliveries import pull_request_event, signed  # noqa: E402
from service.devkit.sandbox.main import FULL_NAME, REPO_ID, post_webhook, wait_until  # noqa: E402
from service.devkit.sandbox.sample_index import write_sample_index  # noqa: E402
from service.devkit.sandbox.sample_repo import SampleRepo, create_sample_repo  # noqa: E402
from service.devkit.sandbox.stack import INSTALLATION_ID, Stack  # noqa: E402
from service.store import Job, Store  # noqa: E402
from service.store.claims import Claims  # noqa: E402
from service.store.rows import INTERNAL_TRIGGERS  # noqa: E402

DEADLINE_S = 1500
SAMPLE_REPOS: dict[Path, SampleRepo] = {}


def pull_request(stack: Stack, number: int) -> dict[str, object]:
    """The sample repository's pull request `number` on the emulator (good head when odd, buggy when even)."""
    path = stack.root / "repos" / FULL_NAME
    if not path.exists():
        write_sample_index(stack.root / "index")  # the sample repository's dependency, as the sandbox serves it
    repo = create_sample_repo(path) if not path.exists() else SAMPLE_REPOS[path]
    SAMPLE_REPOS[path] = repo
    stack.emulator.add_repo(FULL_NAME)
    stack.emulator.add_installation(INSTALLATION_ID, repos=[FULL_NAME])
    sha = repo.good_sha if number % 2 else repo.buggy_sha
    branch = f"pr-{number}"
    stack.emulator.add_pull(FULL_NAME, number, sha, branch, "main", "octocat", "OWNER")
    return pull_request_event("opened", full_name=FULL_NAME, repo_id=REPO_ID, installation_id=INSTALLATION_ID,
                              clone_url=f"https://github.com/{FULL_NAME}.git", number=number, head_sha=sha,
                              head_ref=branch, base_sha=repo.base_sha)


def open_pull_requests(stack: Stack, numbers: range) -> None:
    for number in numbers:
        post_webhook(stack, "pull_request", pull_request(stack, number))


def signed_pull_request(stack: Stack, number: int) -> Delivery:
    return signed(stack.webhook_secret, "pull_request", pull_request(stack, number), f"campaign-pr-{number}")


def cpu_jobs(store: Store) -> list[Job]:
    return [j for j in store.jobs_in_state("queued", "running", "completed") if j.device == "cpu"]


def reportable_jobs(store: Store) -> list[Job]:
    """Jobs whose check runs GitHub should show: all but internal runs' (a base run's, a canary's: never reported)."""
    internal = {r.id for r in store.recent_runs(limit=100_000) if r.trigger in INTERNAL_TRIGGERS}
    return [j for j in cpu_jobs(store) if j.run_id not in internal]


def kill_worker_mid_job(stack: Stack, store: Store, spared: set[str], expected_jobs: int,
                        supervisor: Supervisor) -> float | None:
    """SIGKILL the cpu worker while a job runs (a job not killed before); seconds until it runs again, as a new
    attempt. None when every job finished before one could be caught running."""
    def victim() -> Job | None:
        # The suite job (seconds of torch.compile), not the repository's own few-second tests.
        return next((j for j in cpu_jobs(store) if j.state == "running" and j.suite != "repo" and j.id not in spared),
                    None)

    def all_done() -> bool:
        jobs = cpu_jobs(store)
        return len(jobs) >= expected_jobs and all(j.state == "completed" for j in jobs)

    wait_until(lambda: victim() is not None or all_done(), DEADLINE_S, "a running cpu job", 0.1)
    job = victim()
    if job is None:
        return None
    spared.add(job.id)
    time.sleep(1)  # inside the job: its container or process is up
    now = store.get_job(job.id)
    if now is None or now.state != "running" or now.attempt != job.attempt:
        return kill_worker_mid_job(stack, store, spared, expected_jobs, supervisor)  # finished: catch another one
    with supervisor.deliberate:
        killed_at = time.monotonic()
        stack.kill("worker-cpu", signal.SIGKILL)
        stack.respawn("worker-cpu")

    def restarted() -> bool:
        now = store.get_job(job.id)
        return now is not None and (now.attempt > job.attempt or now.state == "completed")

    wait_until(restarted, DEADLINE_S, f"{job.id} to run again", 0.2)
    return time.monotonic() - killed_at


def kill_redis_with_jobs_queued(stack: Stack, store: Store, supervisor: Supervisor) -> float | None:
    """kill -9 Redis once at least two cpu jobs wait in the queue, restart it; seconds until every run that was still
    being planned is planned and every job that was queued has its message back in the broker (or has started):
    the work is recovered, and waits its turn."""
    wait_until(lambda: sum(j.state == "queued" for j in cpu_jobs(store)) >= 2, 120, "two queued cpu jobs", 0.1)
    queued = [j for j in cpu_jobs(store) if j.state == "queued"]
    planning = [r.id for r in store.runs_in_state("planning")]
    with supervisor.deliberate:
        stack.kill("redis", signal.SIGKILL)
        stack.respawn("redis")
    restarted_at = time.monotonic()
    claims = Claims(stack.redis_url, 60)

    def recovered() -> bool:
        sent = {str(args[0]) for task, args in claims.pending_tasks(QUEUES) if task == RUN_JOB and args}
        planned = all((run := store.get_run(r)) is not None and run.state != "planning" for r in planning)
        return planned and all(q.id in sent or (job := store.get_job(q.id)) is None or job.state != "queued"
                               for q in queued)

    wait_until(recovered, DEADLINE_S, "the jobs queued at the Redis kill to be sent again", 0.2)
    return time.monotonic() - restarted_at


def tally(stack: Stack, store: Store, prs: int) -> dict[str, object]:
    runs = stack.emulator.check_runs(FULL_NAME)
    generations = Counter(r["external_id"] for r in runs)
    jobs = reportable_jobs(store)
    reported = {r["external_id"] for r in runs if r["status"] == "completed"}
    deployment = hashlib.sha256(stack.env()["COMPILE_CI_DATABASE_URL"].encode()).hexdigest()[:12]
    containers = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={LABEL}", "--filter",
                                 f"label={DEPLOYMENT_LABEL}={deployment}"], capture_output=True, text=True,
                                check=False).stdout.split()
    runs_reported = {r["external_id"].split("-", 1)[0] for r in runs}
    return {
        "pull_requests_without_check_runs": prs - len(runs_reported),
        "jobs": len(jobs),
        "lost": sum(j.external_id not in reported for j in jobs),
        "stuck": sum(r["status"] != "completed" for r in runs) + sum(j.state != "completed" for j in jobs),
        "duplicated": sum(n - 1 for n in generations.values() if n > 1),
        "attempts": sum(j.attempt for j in jobs),
        "orphan_containers": len(containers),
        "emulator_errors": len(stack.emulator.errors),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prs", type=int, default=16)
    parser.add_argument("--worker-kills", type=int, default=3)
    parser.add_argument("--postgres", action="store_true", help="on PostgreSQL 15, and its faults too")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="compile-ci-faults-"))
    started = time.monotonic()
    postgres = LocalPostgres(fast=False, disk_mb=64 if os.geteuid() == 0 else 0) if args.postgres else None
    try:
        if postgres is not None:
            postgres.start()
        return campaign(args, root, started, postgres)
    finally:
        if postgres is not None:
            postgres.stop()


def campaign(args: argparse.Namespace, root: Path, started: float, postgres: LocalPostgres | None) -> int:
    with Stack(root, database_url=postgres.url if postgres else "") as stack:
        store = Store(stack.env()["COMPILE_CI_DATABASE_URL"])
        stack.emulator.inject("POST", r"/check-runs$", 502, apply=True)
        stack.emulator.inject("PATCH", r"/check-runs/\d+$", 403, headers={"Retry-After": "1"})
        supervisor = Supervisor(stack)
        supervisor.start()
        try:
            half = args.prs // 2
            open_pull_requests(stack, range(1, half + 1))  # the first half meets the Redis kill
            redis = kill_redis_with_jobs_queued(stack, store, supervisor)
            print(f"Redis killed and restarted: recovered in {redis and round(redis, 1)} s", flush=True)
            open_pull_requests(stack, range(half + 1, args.prs + 1))  # the second half meets the worker kills
            spared: set[str] = set()
            expected = 2 * args.prs  # the sample repository's correctness and repo jobs on cpu, per pull request
            kills = [kill_worker_mid_job(stack, store, spared, expected, supervisor) for _ in range(args.worker_kills)]
            worker = [s for s in kills if s is not None]
            print(f"cpu worker killed mid-job: ran again in {[round(s, 1) for s in worker]} s", flush=True)
            prs, database = args.prs, {}
            if postgres is not None:
                numbers = list(range(prs + 1, prs + 7))
                faults, deliveries = run_faults(stack, postgres, store, lambda n: signed_pull_request(stack, n),
                                                numbers)
                prs += 2 * len(faults)  # two pull requests per fault
                database = {"postgres_faults": faults, "refused_improperly": deliveries.improper_refusals,
                            "answers_during_faults": {str(k): v for k, v in sorted(deliveries.statuses.items())}}

            def settled() -> bool:
                runs = stack.emulator.check_runs(FULL_NAME)
                return len(runs) >= 2 * prs and all(r["status"] == "completed" for r in runs) and all(
                    j.state == "completed" for j in cpu_jobs(store))

            wait_until(settled, DEADLINE_S, "every check run to complete", 1.0)
            result = {**tally(stack, store, prs), "restarted_after_exiting": dict(supervisor.restarts),
                      "worker_kill_recovery_s": [round(s, 1) for s in worker],
                      "redis_kill_recovery_s": None if redis is None else round(redis, 1), **database,
                      "wall_s": round(time.monotonic() - started, 1), "logs": str(root)}
        finally:
            supervisor.stop()
    report(result, prs)
    failed = ("pull_requests_without_check_runs", "lost", "stuck", "duplicated", "orphan_containers",
              "refused_improperly")
    return 1 if any(result.get(key) for key in failed) else 0


def report(result: dict[str, object], prs: int) -> None:
    print(f"pull requests {prs}, without check runs {result['pull_requests_without_check_runs']}; "
          f"jobs reported to GitHub {result['jobs']}: lost {result['lost']}, stuck {result['stuck']}, "
          f"duplicated {result['duplicated']}; orphan containers {result['orphan_containers']}")
    print(f"worker SIGKILL -> job running again: {result['worker_kill_recovery_s']} s")
    print(f"Redis kill -9 + restart -> runs planned, queued jobs' messages back: {result['redis_kill_recovery_s']} s")
    print(f"processes that exited by themselves and were started again: {result['restarted_after_exiting'] or 0}")
    for fault in result.get("postgres_faults") or []:
        assert isinstance(fault, dict)
        print(f"PostgreSQL {fault['fault']} for {HOLD_S:.0f} s: {fault['refused']} delivery refused "
              f"(503 + Retry-After + JSON, or no answer), accepted again {fault['accepted_again_s']} s after")
    if "refused_improperly" in result:
        print(f"deliveries refused without Retry-After and JSON: {result['refused_improperly']}")
    print(json.dumps(result))


if __name__ == "__main__":
    sys.exit(main())
