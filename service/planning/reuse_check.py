"""Taking a job's reused results from its source, once both are known, and only if every input is the same.

The planner decided statically which groups of tests a change cannot reach (service/planning/reuse_plan.py); here,
whenever the job is judged (after it ends, and again when its source ends: either may come first), the keys each
job recorded for those groups must be equal and so must the compiler fingerprints the two jobs measured at run
time. When they are not, the run-time answer wins: the reuse is refuted, logged, and the job runs again whole. So
the verdict is the same whichever job finishes first: the source's results when every input is the same, else
the job's own.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum

from service.store import Job, Run, Store
from service.store.reuse import JobInputs, consumers_of, fill_reused, inputs_of, record_refuted, reset_reused
from service.store.shards import NOT_RUN, not_affected_results
from suites.shard_plan import CORPUS_GROUP

log = logging.getLogger(__name__)
RESULTS = ("success", "failure")


class Taken(StrEnum):
    NONE = "none"  # the job reuses nothing (or has not ended with test results)
    PENDING = "pending"  # its source has not finished (or its own source has not): judged again when it does
    FILLED = "filled"  # every reused test carries its source's result
    REFUTED = "refuted"  # an input differs, or the source has no result: the job must run them


@dataclass(frozen=True)
class Take:
    state: Taken
    why: str = ""  # for REFUTED: what differed, in words
    source: Job | None = None


def take_from_source(store: Store, run: Run, job: Job) -> Take:
    """Fill a finished job's reused tests from its source (again each time: the source may have been re-run)."""
    if job.state != "completed" or job.conclusion not in RESULTS:
        return Take(Taken.NONE)
    rows = not_affected_results(store, job.id, job.attempt)
    mine = inputs_of(store, job.id, job.attempt)
    if not rows or mine is None or not mine.source_job_id:
        return Take(Taken.NONE)
    source = store.get_job(mine.source_job_id)
    if source is None:
        source_run = store.get_run(mine.source_run_id)
        if source_run is not None and source_run.state == "planning":
            return Take(Taken.PENDING)  # its jobs are not planned yet: judged again when its job finishes
        return _refuted(store, job, mine, f"its source job {mine.source_job_id} does not exist")
    if source.state != "completed":
        reset_reused(store, job.id, job.attempt)  # a source run again shows nothing of its older attempt
        return Take(Taken.PENDING, source=source)
    if source.conclusion not in RESULTS:
        return _refuted(store, job, mine, f"its source job {source.id} ended without test results ({source.title})",
                        source)
    theirs = inputs_of(store, source.id, source.attempt)
    why = disagreement(mine, theirs)
    if why:
        return _refuted(store, job, mine, why, source)
    results = {r.nodeid: r for r in store.results_of(source.id, source.attempt)}
    missing = [r.nodeid for r in rows if r.nodeid not in results]
    if missing:
        return _refuted(store, job, mine, f"job {source.id} has no result for {missing[0]}"
                        + (f" and {len(missing) - 1} more" if len(missing) > 1 else ""), source)
    if any(results[r.nodeid].outcome == NOT_RUN for r in rows):
        return Take(Taken.PENDING, source=source)  # the source reuses them too, from a job still running
    fill_reused(store, job.id, job.attempt, source, results)
    return Take(Taken.FILLED, source=source)


def disagreement(mine: JobInputs, theirs: JobInputs | None) -> str:
    """Why the reused results are not this job's ("" when every input is the same)."""
    if theirs is None:
        return "its source recorded no inputs (it ran before compile-ci kept them)"
    for group in mine.reused or ():
        have, want = (mine.keys or {}).get(group), (theirs.keys or {}).get(group)
        if have is None or have != want:
            what = "the built-in corpus" if group == CORPUS_GROUP else group
            mine_inputs = (mine.suites, mine.build, mine.device, mine.torch, mine.config)
            theirs_inputs = (theirs.suites, theirs.build, theirs.device, theirs.torch, theirs.config)
            if mine_inputs != theirs_inputs:
                return f"the inputs of {what} differ from job {theirs.job_id}'s (suite code, image, torch or config)"
            return f"the files {what} imports differ from job {theirs.job_id}'s"
    ours, source_print = mine.fingerprint, theirs.fingerprint
    if ours is None or source_print is None:
        side = "this job's" if ours is None else f"job {theirs.job_id}'s"
        return f"{side} compiler fingerprint is unknown"
    if ours != source_print:
        return (f"the compiler fingerprint at run time ({ours or 'none changed'}) differs from job "
                f"{theirs.job_id}'s ({source_print or 'none changed'})")
    return ""


def _refuted(store: Store, job: Job, mine: JobInputs, why: str, source: Job | None = None) -> Take:
    log.warning("job %s attempt %d: its reused results do not hold, so it runs again whole: %s", job.id, job.attempt,
                why)
    record_refuted(store, job.id, job.attempt, why)
    reset_reused(store, job.id, job.attempt)
    return Take(Taken.REFUTED, why, source)


def consumers(store: Store, job: Job) -> list[str]:
    """The jobs that reuse results of this one: judged again when it finishes."""
    return consumers_of(store, job.id)
