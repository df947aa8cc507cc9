"""How many shards a job runs as: the live worker slots of its device (the same broadcast the planner asks), capped
by COMPILE_CI_MAX_SHARDS, by its number of tests and by what its recorded test time is worth; a push's, chosen for
its whole run (service/jobs/run_plan.py)."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping

from service.jobs.context import WorkerContext
from service.jobs.run_plan import Work, choose, shard_count
from service.planning.plan import job_queue
from service.store import APPROVAL_SUITE, Job, Run
from service.store.shards import recorded_tests
from service.torch_versions import queue_for


def reachable(recorded: Mapping[str, tuple[float, tuple[str, ...]]], left: Collection[str]) -> dict[str, float]:
    """The recorded seconds of the tests a job runs: all but those whose every group is left to its source (a test
    whose groups were not recorded counts)."""
    return {nodeid: seconds for nodeid, (seconds, groups) in recorded.items()
            if not (left and groups and set(groups) <= set(left))}


# A job without recorded times takes its tests while it runs (suites/claiming.py): its shards need not split its
# work evenly, only keep the slots fed, so the run as a whole gets this many shards per slot, each job an equal part.
# Replayed on five cold GPU records of the real-model sample (bench/run_plan_replay.py, "first push, taken"), two a slot
# (two shards for each of six jobs on four slots) ends 0.32-0.37 x one slot cold where one shard per slot for every
# job (24 starts) ends 0.38-0.41 x: each shard pays a start.
PIECES_PER_SLOT = 2


def first_count(ctx: WorkerContext, run: Run, job: Job, slots: int) -> int:
    """The count of a job without records: PIECES_PER_SLOT shards a slot over the run's jobs on its queue."""
    mates = sum(1 for other in ctx.store.jobs_of(run.id) if other.device == job.device and other.torch == job.torch
                and other.suite != APPROVAL_SUITE and job_queue(other.suite, other.device) == other.device)
    return max(1, math.ceil(PIECES_PER_SLOT * slots / max(1, mates)))


def push_count(ctx: WorkerContext, run: Run, job: Job, slots: int) -> int | None:
    """A push's count for `job`, from the plan of every job of its run on the same queue (they run every test, so
    their work is the records'); None where a job of them has no record (its work is unknown: the per-job rule)."""
    work: list[Work] = []
    mine = None
    for other in ctx.store.jobs_of(run.id):
        if other.device != job.device or other.torch != job.torch or other.suite == APPROVAL_SUITE \
                or job_queue(other.suite, other.device) != other.device:
            continue
        durations = reachable(recorded_tests(ctx.store, run.repo_full_name, other.suite, other.device), ())
        if not durations:
            return None
        mine = len(work) if other.id == job.id else mine
        work.append(Work(other.suite, durations))
    if mine is None:
        return None
    settings = ctx.settings
    rule = [shard_count(settings.max_shards, slots, w.durations, settings.shard_min_seconds) for w in work]
    counts = choose(work, slots, settings.max_shards, settings.shard_min_seconds,
                             settings.shard_start_seconds, rule)
    return counts[mine]


def plan_for(ctx: WorkerContext, run: Run, job: Job,
             not_affected: Callable[[], Collection[str]] | None = None) -> tuple[int, dict[str, float]]:
    """The shard count and the recorded durations it was made from ({} for a job that runs whole). `not_affected`:
    the groups whose results the job will take from its source (asked only when the job could be sharded): their
    tests are left out of the count, so a pull request that changes one model is split by that model's tests' time,
    not by the whole suite's."""
    if job.suite == APPROVAL_SUITE or ctx.settings.max_shards <= 1:
        return 1, {}
    if job_queue(job.suite, job.device) != job.device:
        return 1, {}  # a multi-GPU job (distributed) runs whole, on the two GPUs of its own queue
    # The slots of the workers that take this job: its device's, on its torch version (service/torch_versions.py).
    slots = (ctx.queue.worker_slots() or {}).get(queue_for(job.device, job.torch), 1)
    if slots <= 1:
        return 1, {}  # one worker slot: one shard, exactly as before sharding existed
    recorded = recorded_tests(ctx.store, run.repo_full_name, job.suite, job.device)
    durations = reachable(recorded, ())
    count = shard_count(ctx.settings.max_shards, slots, durations, ctx.settings.shard_min_seconds)
    if not durations:  # its shards take their tests while they run (service/jobs/sharding.py)
        return min(count, first_count(ctx, run, job, slots)), durations
    planned = push_count(ctx, run, job, slots) if run.trigger == "push" and count > 1 else None
    count = count if planned is None else planned
    if count <= 1 or not recorded or not_affected is None:
        return count, durations  # leaving tests out could only lower a count of one: the change is not read
    durations = reachable(recorded, not_affected())
    if not durations:
        return 1, {}  # every recorded test is left to the source job: nothing worth a second shard
    # A push that leaves tests to its source has less work than its plan counted: the rule for what is left caps it.
    return min(count, shard_count(ctx.settings.max_shards, slots, durations, ctx.settings.shard_min_seconds)), durations
