"""The order a run's jobs are queued in.

A run whose jobs have recorded test times is queued in the store's order (by suite), which the run plan simulates
to choose its shard counts (service/jobs/run_plan.py). A run none of whose jobs has any (a repository's first push)
has no times to plan from: its shards take their tests while they run (suites/claiming.py), and what is left is the
order of the jobs on the queue. The slot that frees last decides the run's end, so the longest job should start
first and the shortest fill the gaps at the end (longest processing time first). A first push has no time of its
own, so the order comes from each built-in suite's weight: its share of a model repository's suites, cold, as
another repository measured it (tests/suites/declared_repo on an H100: docs/suites.md). Replayed on the real-model
sample's nine GPU records (bench/run_plan_replay.py, "first push, taken"), this order ends the first push at
0.313-0.355 x one slot where the suites' alphabetical order ends it at 0.317-0.364 x; measured on the H200, 0.328 x,
with the first shard of each job run by the slot that fanned it out (service/jobs/sharding.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from service.jobs.context import WorkerContext
from service.store import Job, Run
from service.store.shards import has_records

# Seconds, cold, one cuda slot, tests/suites/declared_repo (H100); ops (every op's sweep, pushes only) and a
# repository's own tests are not in that measurement: the sweep is the longest job there is, a repository's own
# tests are weighed as the middle of the rest.
SUITE_WEIGHT = {"ops": 1000.0, "correctness": 102.2, "autograd": 76.1, "freezing": 44.9, "repo": 30.0,
                "passes": 29.0, "layout": 21.0, "fusion": 17.6}
UNKNOWN_WEIGHT = 30.0


def queue_order(ctx: WorkerContext, run: Run, jobs: Sequence[Job]) -> list[Job]:
    """`jobs` (the store's order) as they are to be queued: heaviest suite first when none of them has records."""
    if any(has_records(ctx.store, run.repo_full_name, job.suite, job.device) for job in jobs):
        return list(jobs)
    return sorted(jobs, key=lambda job: -SUITE_WEIGHT.get(job.suite, UNKNOWN_WEIGHT))  # stable: ties keep the order
