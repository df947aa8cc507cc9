"""bench/shards.py's figures: a run's wall, each job's and shard's times (where the slots' time went), each test's own
time, and an earlier run's per-test times recorded as a finished push (`--durations-from`)."""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import uuid
from pathlib import Path
from typing import Protocol

from bench.shard_phases import shard_phases
from service.devkit.sandbox.stack import INSTALLATION_ID
from service.jobs import lifecycle
from service.jobs.lifecycle import Conclusion, Outcome
from service.store import Job, NewRun, Store, TestRecord
from service.store.shards import shards_of

FULL_NAME = "bench/model-zoo"


class HasStore(Protocol):
    store: Store
    settings: object


def run_wall(jobs: list[Job]) -> float:
    """First job's start to last job's end: what a pull request waits for all its suites."""
    starts = [j.started_at for j in jobs if j.started_at is not None]
    ends = [j.finished_at for j in jobs if j.finished_at is not None]
    return (max(ends) - min(starts)).total_seconds() if starts and ends else 0.0


def _offset(when: datetime.datetime | None, t0: datetime.datetime | None) -> float | None:
    return round((when - t0).total_seconds(), 2) if when is not None and t0 is not None else None


def job_figures(zoo: HasStore, job: Job, t0: datetime.datetime | None = None) -> dict[str, object]:
    """`t0`: the run's first start; each shard's (or the whole job's) start and end are given from it, and each
    test's own time with the shard that ran it, in the order they ran (where the slots' time went)."""
    results = [r for r in zoo.store.results_of(job.id, job.attempt) if not r.not_affected]
    shards = []
    for shard in shards_of(zoo.store, job.id, job.attempt):
        tests = [r for r in results if r.shard == shard.index]
        busy = sum(r.duration_s for r in tests)
        shards.append({"wall_s": shard.duration_s or 0.0, "tests": len(tests), "tests_s": busy,
                       "overhead_s": (shard.duration_s or 0.0) - busy, "start_s": _offset(shard.started_at, t0),
                       "end_s": _offset(shard.finished_at, t0),
                       "phases": shard_phases(_attempt_dir(zoo, job) / "shards" / str(shard.index), shard.started_at,
                                              shard.finished_at)})
    return {"suite": job.suite, "conclusion": job.conclusion, "title": job.title, "wall_s": job.duration_s or 0.0,
            "start_s": _offset(job.started_at, t0), "end_s": _offset(job.finished_at, t0),
            "each_test": [[r.nodeid, r.shard, round(r.duration_s, 3)] for r in results],
            "tests_run": len(results), "tests_s": sum(r.duration_s for r in results), "passed": job.passed,
            "failed": job.failed, "not_affected": len(zoo.store.results_of(job.id, job.attempt)) - len(results),
            "shards": shards, "detail": job.detail[:600] if job.conclusion != "success" else "",
            "failures": [f"{r.nodeid} (shard {r.shard}): {r.message[:1500]}" for r in results
                         if r.outcome in ("failed", "error")]}


def _attempt_dir(zoo: HasStore, job: Job) -> Path:
    artifacts = getattr(zoo.settings, "artifacts_dir", Path("/nonexistent"))
    return Path(artifacts) / job.run_id / job.id / str(job.attempt)


def describe(zoo: HasStore, jobs: list[Job]) -> tuple[str, dict[str, object]]:
    t0 = min((j.started_at for j in jobs if j.started_at is not None), default=None)
    figures = {"wall_s": run_wall(jobs), "jobs": [job_figures(zoo, job, t0) for job in jobs]}
    line = f"run wall {figures['wall_s']:.1f} s"
    for job in figures["jobs"]:  # type: ignore[attr-defined]
        line += (f"\n  {job['suite']}: job wall {job['wall_s']:.1f} s, {job['tests_run']} tests run, "
                 f"{job['not_affected']} from the base ({job['title']})")
        for index, shard in enumerate(job["shards"]):
            line += (f"\n    shard {index + 1}/{len(job['shards'])}: {shard['wall_s']:.1f} s, {shard['tests']} tests "
                     f"taking {shard['tests_s']:.1f} s, overhead {shard['overhead_s']:.1f} s"
                     + (f" (phases: {', '.join(f'{k} {v:.2f}' for k, v in shard['phases'].items())})"
                        if shard.get("phases") else ""))
        if not job["shards"]:
            line += f"\n    whole: tests take {job['tests_s']:.1f} s"
        if job["detail"]:
            line += f"\n    detail: {job['detail']}"
        for failure in job["failures"]:
            line += f"\n    FAILED {failure}"
    return line, figures


def seed_durations(zoo: HasStore, path: Path, slots: int, device: str) -> int:
    """An earlier run's per-test times (shards.json's `each_test`) as a finished push of this repository, one
    completed job per suite: what the planner splits the next push by."""
    data = json.loads(path.read_text())
    run_data = next(r for r in data["runs"] if r["workers"] == slots and r["kind"].startswith("push"))
    made, _ = zoo.store.create_run_if_absent(NewRun(
        repo_full_name=FULL_NAME, repo_id=4200, installation_id=INSTALLATION_ID,
        clone_url=f"https://github.com/{FULL_NAME}.git", private=False, trigger="push",
        trigger_ref=f"push/seeded-{uuid.uuid4().hex[:8]}", pr_number=None, branch="main", head_sha="5" * 40,
        sender="bench"))
    zoo.store.add_jobs_if_absent([lifecycle.new_job(made, j["suite"], device, 3600) for j in run_data["jobs"]])
    count = 0
    for figures, job in zip(sorted(run_data["jobs"], key=lambda j: j["suite"]),
                            sorted(zoo.store.jobs_of(made.id), key=lambda j: j.suite), strict=True):
        started = lifecycle.start(zoo.store, job.id, "seeded")
        assert started is not None
        zoo.store.replace_results(job.id, started.attempt, [TestRecord(nodeid, "passed", float(seconds))
                                                            for nodeid, _shard, seconds in figures["each_test"]])
        lifecycle.complete(zoo.store, started, Outcome(Conclusion.SUCCESS, "seeded"))
        count += len(figures["each_test"])
    return count


def versions() -> dict[str, str]:
    found = {}
    for name in ("torch", "torchvision", "timm", "transformers", "triton", "pytest"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found
