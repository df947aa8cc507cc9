"""The job lifecycle's one owner: run and job states, and the named transitions that alone write them.

    run:  planning -> (waiting -> planning) -> planned      gate: trusted | waiting -> approved (one sha)
          planning --head not fetched--> planning (a retry due later; default jobs shown queued) until fetched
    job:  queued -> running -> completed(conclusion)       re-run: completed -> queued, as a new check run
          running --infrastructure error, once--> queued
          running|queued --worker or message lost (reaper)--> queued, then completed(failure)
          queued --superseded, /cancel--> completed(cancelled); running: cancel requested, its worker completes it
    shard (a sharded job's attempt: queued -> running as N shards, completed when the last one is merged):
          queued -> running -> completed(conclusion); running --infrastructure error, once, or lost--> queued

Every transition is one conditional UPDATE (Store.transition): when two workers, or a worker and a webhook, race
for one job, exactly one wins and the other is told so (None / False) instead of overwriting it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from service.store import APPROVAL_SUITE, Job, Run, Shard, Store, job_id_for, shard_id_for, utcnow


class RunState(StrEnum):
    PLANNING = "planning"  # jobs not known yet (the config is read by the planner)
    WAITING = "waiting"  # an untrusted author's head: nothing runs until /ok-to-test
    PLANNED = "planned"  # job rows exist


class Gate(StrEnum):
    TRUSTED = "trusted"
    WAITING = "waiting"
    APPROVED = "approved"  # /ok-to-test for this run's head sha only


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"


class Conclusion(StrEnum):
    SUCCESS = "success"
    FAILURE = "failure"
    NEUTRAL = "neutral"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    ACTION_REQUIRED = "action_required"


INFRA_TITLE = "Infrastructure error — not a test failure"
FETCHING = "Fetching the head"  # the title of a job shown before its run's head (and so its config) could be read


class Cancel(StrEnum):
    CANCELLED = "cancelled"  # it was queued: completed now
    REQUESTED = "requested"  # it is running: its runner stops it within about a second


@dataclass(frozen=True)
class Outcome:
    """How an attempt ended, as the check run will say it."""

    conclusion: Conclusion
    title: str
    detail: str = ""
    counts: dict[str, int] = field(default_factory=dict)  # passed / failed / skipped / errors / xfailed / xpassed
    torch_version: str = ""


_NEW_GENERATION: dict[str, object] = {  # what a new generation of a job (a re-run: a new check run) starts from
    "conclusion": None, "title": "", "detail": "", "passed": 0, "failed": 0, "skipped": 0, "errors": 0, "xfailed": 0,
    "xpassed": 0, "check_run_id": None, "reported": "", "reported_digest": "", "annotations_sent": 0,
    "cancel_requested": False, "infra_failures": 0, "progress_done": 0, "progress_total": 0, "progress_current": "",
    "started_at": None, "finished_at": None, "verdict_conclusion": "", "verdict_title": "", "shards": 1}


# --- runs -------------------------------------------------------------------------------------------


def new_job(run: Run, suite: str, device: str, timeout_s: int) -> Job:
    """A queued job row of a run (not stored yet: `plan` stores a run's rows together)."""
    return Job(id=job_id_for(run.id, suite, device), run_id=run.id, suite=suite, device=device, timeout_s=timeout_s,
               attempt=0, rerun=0, state=JobState.QUEUED, reported="", passed=0, failed=0, skipped=0, errors=0,
               title="", detail="", queued_at=utcnow())


def settled_at_planning(job: Job, conclusion: Conclusion, title: str, detail: str) -> Job:
    """A job that is decided before it could run (an invalid config, no runner for its device)."""
    job.state, job.conclusion, job.title, job.detail, job.finished_at = (
        JobState.COMPLETED, conclusion, title, detail, utcnow())
    return job


def plan(store: Store, run: Run, jobs: Iterable[Job], config_error: str | None) -> bool:
    """planning -> planned with its job rows; rows that exist already (a retried plan) are kept."""
    store.add_jobs_if_absent(jobs)
    done = store.transition(Run, run.id, {"state": (RunState.PLANNING, RunState.PLANNED)},
                            {"state": RunState.PLANNED, "config_error": config_error, "plan_retry_at": None})
    return done is not None


def settle_fetching(store: Store, run: Run, planned: Iterable[Job], unasked: str) -> None:
    """Its head fetched (or given up on): each job shown queued while fetching (plan_retries) becomes the planned job
    of its id (no torch of its own: default jobs), or, when its config does not ask for it, neutral (`unasked`)."""
    rows = {job.id: job for job in planned}
    for shown in store.jobs_of(run.id):
        row = rows.get(shown.id)
        values = {"state": row.state, "conclusion": row.conclusion, "title": row.title, "detail": row.detail,
                  "timeout_s": row.timeout_s, "finished_at": row.finished_at} if row else {
            "state": JobState.COMPLETED, "conclusion": Conclusion.NEUTRAL, "title": "Not run: not asked for",
            "detail": unasked, "finished_at": utcnow()}
        store.transition(Job, shown.id, {"state": JobState.QUEUED, "title": FETCHING}, values)


def planning_failed(store: Store, run: Run, next_try_at: datetime) -> Run | None:
    """One failed try at planning (its head not fetched), counted once, with when the next one is due (the reaper
    leaves the run alone until then). None when another planner counted it first: its chain goes on, not this."""
    return store.transition(Run, run.id, {"state": RunState.PLANNING, "plan_tries": run.plan_tries},
                            {"plan_tries": Run.plan_tries + 1, "plan_retry_at": next_try_at})


def wait_for_approval(store: Store, run: Run, detail: str) -> Job:
    """planning -> waiting: one completed `action_required` job stands for the run on GitHub."""
    job = settled_at_planning(new_job(run, APPROVAL_SUITE, "none", 0), Conclusion.ACTION_REQUIRED,
                              "Waiting for approval", detail)
    store.add_jobs_if_absent([job])
    store.transition(Run, run.id, {"state": RunState.PLANNING}, {"state": RunState.WAITING})
    return job


def approve(store: Store, run_id: str, approver: str) -> bool:
    """Gate waiting -> approved, once: two `/ok-to-test` at the same moment plan the run once."""
    done = store.transition(Run, run_id, {"gate": Gate.WAITING},
                            {"gate": Gate.APPROVED, "approved_by": approver, "state": RunState.PLANNING})
    return done is not None


def record_approval(store: Store, run: Run) -> Job | None:
    """The waiting check run is followed by a new, green one naming who approved which commit."""
    values = {**_NEW_GENERATION, "rerun": Job.rerun + 1, "conclusion": Conclusion.SUCCESS,
              "title": f"Approved by @{run.approved_by}", "finished_at": utcnow(), "queued_at": utcnow(),
              "detail": f"@{run.approved_by} approved {run.head_sha[:12]} with `/ok-to-test`. "
                        "A new push needs a new approval."}
    approval = job_id_for(run.id, APPROVAL_SUITE, "none")
    return store.transition(Job, approval, {"state": JobState.COMPLETED, "conclusion": Conclusion.ACTION_REQUIRED},
                            values)


def mark_run_cancelled(store: Store, run_id: str, reason: str) -> None:
    """Its jobs are cancelled one by one (`cancel`); a run still planning gets no jobs at all."""
    store.transition(Run, run_id, {}, {"cancelled_reason": reason})


def resume_run(store: Store, run_id: str) -> None:
    """A /rerun of a cancelled run: planning and re-runs are allowed again."""
    store.transition(Run, run_id, {}, {"cancelled_reason": None})


# --- jobs -------------------------------------------------------------------------------------------


def start(store: Store, job_id: str, runner: str) -> Job | None:
    """queued (or running, when its previous worker was lost) -> running, as a new attempt."""
    return store.transition(Job, job_id, {"state": (JobState.QUEUED, JobState.RUNNING)},
                            {"state": JobState.RUNNING, "attempt": Job.attempt + 1, "runner": runner,
                             "started_at": utcnow(), "finished_at": None, "shards": 1})


def record_progress(store: Store, job: Job, done: int, total: int, current: str) -> bool:
    values = {"progress_done": done, "progress_total": total, "progress_current": current}
    return store.transition(Job, job.id, {"state": JobState.RUNNING, "attempt": job.attempt}, values) is not None


def retry_after_infra_error(store: Store, job: Job, reason: str) -> bool:
    """running -> queued, once per generation: the runner or the checkout broke, not the pull request."""
    values = {"state": JobState.QUEUED, "infra_failures": Job.infra_failures + 1, "started_at": None,
              "title": "Retrying after an infrastructure error", "detail": reason, "queued_at": utcnow()}
    when = {"state": JobState.RUNNING, "attempt": job.attempt, "infra_failures": 0, "cancel_requested": False}
    return store.transition(Job, job.id, when, values) is not None


def complete(store: Store, job: Job, outcome: Outcome) -> Job | None:
    """running -> completed, for the attempt that ran: a stale worker never overwrites a newer attempt."""
    counts = {k: outcome.counts.get(k, 0) for k in ("passed", "failed", "skipped", "errors", "xfailed", "xpassed")}
    values = {"state": JobState.COMPLETED, "conclusion": outcome.conclusion, "title": outcome.title,
              "detail": outcome.detail, "finished_at": utcnow(), "torch_version": outcome.torch_version, **counts}
    return store.transition(Job, job.id, {"state": JobState.RUNNING, "attempt": job.attempt}, values)


def cancel(store: Store, job_id: str, reason: str) -> Cancel | None:
    """A queued job completes as cancelled; a running one is asked to stop; None when it is already done."""
    done = {"state": JobState.COMPLETED, "conclusion": Conclusion.CANCELLED, "title": "Cancelled", "detail": reason,
            "finished_at": utcnow()}
    if store.transition(Job, job_id, {"state": JobState.QUEUED}, done) is not None:
        return Cancel.CANCELLED
    asked = store.transition(Job, job_id, {"state": JobState.RUNNING, "cancel_requested": False},
                             {"cancel_requested": True, "detail": reason})
    return Cancel.REQUESTED if asked is not None else None


def drop(store: Store, job_id: str, reason: str) -> bool:
    """The App was removed from the repository: completed, with nothing left to tell GitHub."""
    values = {"state": JobState.COMPLETED, "conclusion": Conclusion.CANCELLED, "title": "Cancelled", "detail": reason,
              "finished_at": utcnow(), "reported": JobState.COMPLETED}
    return store.transition(Job, job_id, {"state": (JobState.QUEUED, JobState.RUNNING)}, values) is not None


def rerun(store: Store, job_id: str) -> Job | None:
    """completed -> queued as a new generation (a new check run; the finished one stays as history)."""
    values = {**_NEW_GENERATION, "rerun": Job.rerun + 1, "state": JobState.QUEUED, "queued_at": utcnow()}
    return store.transition(Job, job_id, {"state": JobState.COMPLETED}, values)


def requeue_lost(store: Store, job: Job, title: str) -> bool:
    """A job whose worker or message was lost goes back to the queue (a lost running attempt counts as a failure)."""
    values: dict[str, object] = {"state": JobState.QUEUED, "queued_at": utcnow()}
    if job.state == JobState.RUNNING:
        values |= {"infra_failures": Job.infra_failures + 1, "title": title, "started_at": None}
    when = {"state": job.state, "attempt": job.attempt}
    return store.transition(Job, job.id, when, values) is not None


def give_up_lost(store: Store, job: Job, detail: str) -> bool:
    """Lost twice: completed as an infrastructure failure, so no check run stays in progress forever."""
    values = {"state": JobState.COMPLETED, "conclusion": Conclusion.FAILURE, "title": INFRA_TITLE, "detail": detail,
              "finished_at": utcnow()}
    when = {"state": job.state, "attempt": job.attempt}
    return store.transition(Job, job.id, when, values) is not None


# --- shards (one attempt of a job split over several workers: service/jobs/sharding.py) -------------------------


def start_sharded(store: Store, job_id: str, runner: str, count: int) -> Job | None:
    """queued -> running as a new attempt that `count` shards run. Only from queued: a redelivered message of a
    sharded job finds it running and leaves it to its shards, which the reaper watches one by one."""
    return store.transition(Job, job_id, {"state": JobState.QUEUED},
                            {"state": JobState.RUNNING, "attempt": Job.attempt + 1, "runner": runner,
                             "started_at": utcnow(), "finished_at": None, "shards": count})


def new_shards(job: Job, plan: str) -> list[Shard]:
    """The queued shards of a sharded attempt (stored with service.store.shards.add_shards_if_absent)."""
    return [Shard(id=shard_id_for(job.id, job.attempt, index), job_id=job.id, job_attempt=job.attempt, index=index,
                  count=job.shards, plan=plan, state=JobState.QUEUED, attempt=0, infra_failures=0, title="",
                  detail="", kind="", queued_at=utcnow()) for index in range(job.shards)]


def start_shard(store: Store, shard_id: str, runner: str) -> Shard | None:
    """queued (or running, when its previous worker was lost) -> running, as the shard's next attempt."""
    return store.transition(Shard, shard_id, {"state": (JobState.QUEUED, JobState.RUNNING)},
                            {"state": JobState.RUNNING, "attempt": Shard.attempt + 1, "started_at": utcnow(),
                             "finished_at": None})


def record_shard_progress(store: Store, shard: Shard, done: int, total: int) -> bool:
    values = {"progress_done": done, "progress_total": total}
    return store.transition(Shard, shard.id, {"state": JobState.RUNNING, "attempt": shard.attempt}, values) is not None


def retry_shard_after_infra_error(store: Store, shard: Shard, reason: str) -> bool:
    """running -> queued, once: the shard alone runs again, its siblings' results stay."""
    values = {"state": JobState.QUEUED, "infra_failures": Shard.infra_failures + 1, "started_at": None,
              "detail": reason, "queued_at": utcnow()}
    when = {"state": JobState.RUNNING, "attempt": shard.attempt, "infra_failures": 0}
    return store.transition(Shard, shard.id, when, values) is not None


def complete_shard(store: Store, shard: Shard, outcome: Outcome, kind: str) -> Shard | None:
    """running -> completed for the shard attempt that ran (`kind`: tests | none | other, for the merge)."""
    values = {"state": JobState.COMPLETED, "conclusion": outcome.conclusion, "title": outcome.title, "kind": kind,
              "detail": outcome.detail, "torch_version": outcome.torch_version, "finished_at": utcnow()}
    return store.transition(Shard, shard.id, {"state": JobState.RUNNING, "attempt": shard.attempt}, values)


def cancel_shard(store: Store, shard_id: str, reason: str) -> bool:
    """A queued shard of a job that was cancelled, re-run or dropped meanwhile: completed without running."""
    values = {"state": JobState.COMPLETED, "conclusion": Conclusion.CANCELLED, "title": "Cancelled", "kind": "other",
              "detail": reason, "finished_at": utcnow()}
    return store.transition(Shard, shard_id, {"state": JobState.QUEUED}, values) is not None


def requeue_lost_shard(store: Store, shard: Shard) -> bool:
    """A shard whose worker or message was lost goes back to the queue alone (a lost running attempt counts)."""
    values: dict[str, object] = {"state": JobState.QUEUED, "queued_at": utcnow()}
    if shard.state == JobState.RUNNING:
        values |= {"infra_failures": Shard.infra_failures + 1, "started_at": None}
    when = {"state": shard.state, "attempt": shard.attempt}
    return store.transition(Shard, shard.id, when, values) is not None


def give_up_lost_shard(store: Store, shard: Shard, detail: str) -> bool:
    """Lost twice: completed as an infrastructure failure, which the merged job then reports."""
    values = {"state": JobState.COMPLETED, "conclusion": Conclusion.FAILURE, "title": INFRA_TITLE, "kind": "other",
              "detail": detail, "finished_at": utcnow()}
    return store.transition(Shard, shard.id, {"state": shard.state, "attempt": shard.attempt}, values) is not None
