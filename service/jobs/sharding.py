"""A suite job run as N shards on N workers: the fan-out, one shard's run, and its hand-over to the merge.

    run_job(job): N > 1 (service/jobs/shard_plan.py) -> job running with N shards: the slot that fanned it out runs
        the first, the others are queued, each its own message, ahead of the jobs that have not started
    run_shard(shard): lease -> attempt -> the runner, told its share (suites/sharding.py) -> results -> completed
    the last shard to complete merges them (service/jobs/shard_merge.py) and completes the job: one check run

A shard holds its own lease: a shard whose worker is lost is re-queued alone by the reaper (service/jobs/
shard_reaper.py), and its siblings' results stay. Cancelling the job stops its shards; a re-run fans out afresh.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from runners.protocol import RunResult
from service.jobs import grants, install, lifecycle, pipeline
from service.jobs.context import WorkerContext
from service.jobs.lease import LEASE_TTL_S, LeaseKeeper, owner_of
from service.jobs.lifecycle import Conclusion, JobState, Outcome
from service.jobs.outcome import judge, read_attempt, write_meta
from service.jobs.shard_merge import kind_of, merge_when_done, shard_results_dir
from service.jobs.shard_plan import plan_for
from service.observability.worker import job_started
from service.planning import affected, base_runs
from service.planning.plan import builtin_suites
from service.planning.reuse_plan import Decided, decide_reuse, record_reuse
from service.planning.selection import Selected, fitted_durations, not_affected_env, shard_env
from service.store import Job, Run, Shard
from service.store.shards import add_shards_if_absent, get_shard, replace_shard_results, shards_of

log = logging.getLogger(__name__)


NOT_SHARDED = None
SHARDED = ""


def run_sharded(ctx: WorkerContext, job_id: str) -> str | None:
    """None (NOT_SHARDED): run the job whole. Otherwise it is a sharded one: fanned out now, when the id of its first
    shard comes back, which the slot that fanned it out runs at once (the others are queued, ahead of the jobs that
    have not started: a job that started finishes first); SHARDED ("") when it was already running as shards (a
    redelivered message), which its shards run and the reaper watches. The slot runs the first shard itself so that
    which shards start first does not depend on which fan-out ended first: four slots that take a run's four first
    job messages start those jobs' shards, in the queue's order (service/jobs/queue_order.py)."""
    job = ctx.store.get_job(job_id)
    run = ctx.store.get_run(job.run_id) if job else None
    if job is None or run is None or job.state == JobState.COMPLETED:
        return NOT_SHARDED
    if job.state == JobState.RUNNING:  # a redelivered message: its shards run it, and the reaper watches them
        return SHARDED if job.shards > 1 else NOT_SHARDED
    if job.cancel_requested or ctx.store.is_uninstalled(run.repo_full_name):
        return NOT_SHARDED  # the whole-job path completes it as it always did
    decided: list[Decided | affected.Decision] = []  # decided once, asked only when the suite's count would shard

    def not_affected() -> tuple[str, ...]:
        decided.append(_decide(ctx, run, job))
        return _decision(decided[0]).not_affected

    count, durations = plan_for(ctx, run, job, not_affected)
    if count <= 1:
        return NOT_SHARDED
    started = lifecycle.start_sharded(ctx.store, job.id, ctx.runner.name, count)
    if started is None:
        return SHARDED  # another worker fanned it out first
    job_started(started)
    plan = _plan(ctx, run, started, durations, decided[0] if decided else _decide(ctx, run, started))
    add_shards_if_absent(ctx.store, lifecycle.new_shards(started, json.dumps(plan)))
    out = attempt_dir(ctx, run, started)
    out.mkdir(parents=True, exist_ok=True)
    (out / "log.txt").write_text(f"{plan['note']}compile-ci: this attempt runs as {count} shards; their logs follow "
                                 f"here when they end.\n")
    pipeline.tell(lambda: ctx.queue.report_job(job.id))
    first, *others = shards_of(ctx.store, started.id, started.attempt)
    for shard in others:
        pipeline.tell(lambda shard=shard: ctx.queue.run_shard(shard.id, job.device, low=run.trigger == "base",
                                                              started=True))
    return first.id


def attempt_dir(ctx: WorkerContext, run: Run, job: Job) -> Path:
    return ctx.settings.artifacts_dir / run.id / job.id / str(job.attempt)


def _decide(ctx: WorkerContext, run: Run, job: Job) -> Decided | affected.Decision:
    """The targets the change cannot affect, from the diff, not yet recorded (a Decision: nothing to record)."""
    work = ctx.settings.data_dir / "work" / f"{job.id}-plan"
    try:
        mirror = ctx.fetch(run)
        config = base_runs.job_config(ctx.checkout, mirror, run, builtin_suites(ctx.suites_dir))
        if isinstance(config, list):
            return affected.Decision()
        return decide_reuse(ctx, run, job, config, mirror, ctx.checkout.export(mirror, run.head_sha, work / "src"))
    except Exception as exc:  # noqa: BLE001 - unsure runs everything; the shards meet any real fault themselves
        return affected.everything(f"the change was not analysed ({type(exc).__name__})")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _decision(decided: Decided | affected.Decision) -> affected.Decision:
    return decided.plan.decision if isinstance(decided, Decided) else decided


def _plan(ctx: WorkerContext, run: Run, job: Job, durations: dict[str, float],
          decided: Decided | affected.Decision) -> dict[str, object]:
    """What every shard of the attempt selects by, decided once: the recorded durations and the targets the change
    cannot affect (decided from the diff before the count, recorded here for the started attempt, so that no shard
    decides differently)."""
    if isinstance(decided, Decided):
        record_reuse(ctx.store, job.id, job.attempt, decided)
    decision = _decision(decided)
    # Without recorded times there is nothing to split by before the shards run: they take their tests as they go.
    return {"durations": fitted_durations(durations), "not_affected": list(decision.not_affected),
            "changed_env": affected.changed_files_env(job.suite, decision.changed), "note": decision.line,
            "dynamic": not durations}


def run_shard(ctx: WorkerContext, shard_id: str) -> None:
    shard = get_shard(ctx.store, shard_id)
    job = ctx.store.get_job(shard.job_id) if shard else None
    run = ctx.store.get_run(job.run_id) if job else None
    if shard is None or job is None or run is None:
        return
    if shard.state == JobState.COMPLETED:
        merge_when_done(ctx, job.id)  # sent again by the reaper: the worker that completed it died before merging
        return
    if job.state != JobState.RUNNING or job.attempt != shard.job_attempt or job.cancel_requested:
        lifecycle.cancel_shard(ctx.store, shard.id, job.detail or "Its job was cancelled or run again.")
        merge_when_done(ctx, job.id)
        return
    owner = owner_of(shard.id)
    if not ctx.claims.acquire_lease(shard.id, owner, LEASE_TTL_S):
        log.info("run_shard %s: already running elsewhere (lease held)", shard.id)
        return
    with LeaseKeeper(ctx.claims, shard.id, owner) as lease:
        started = lifecycle.start_shard(ctx.store, shard.id, ctx.runner.name)
        if started is None:
            return
        retry = _execute(ctx, run, job, started, lease)
    if retry:  # after the lease is gone, or the retry would find it held and drop itself
        pipeline.tell(lambda: ctx.queue.run_shard(shard.id, job.device, first=True))
        return
    merge_when_done(ctx, job.id)


class _ShardWatch(pipeline.Watch):
    """The runner's ~1/s callback for a shard: stop when the job is cancelled, re-run or dropped, or the lease is
    lost; now and then add this shard's progress to the job's (one check run shows the sum of its shards)."""

    def __init__(self, ctx: WorkerContext, job: Job, shard: Shard, lease: LeaseKeeper, out: Path) -> None:
        super().__init__(ctx, job, lease, out)
        self.shard = shard

    def stops(self, current: Job) -> bool:
        return current.state != JobState.RUNNING or current.attempt != self.shard.job_attempt

    def publish(self, progress: tuple[int, int, str]) -> None:
        if not lifecycle.record_shard_progress(self.ctx.store, self.shard, progress[0], progress[1]):
            return
        siblings = shards_of(self.ctx.store, self.job.id, self.job.attempt)
        done = sum(s.progress_done for s in siblings)
        total = sum(s.progress_total for s in siblings)
        current = f"{progress[2]} (shard {self.shard.index + 1} of {self.shard.count})" if progress[2] else ""
        if lifecycle.record_progress(self.ctx.store, self.job, done, total, current):
            pipeline.tell(lambda: self.ctx.queue.report_job(self.job.id))


def _execute(ctx: WorkerContext, run: Run, job: Job, shard: Shard, lease: LeaseKeeper) -> bool:
    """One attempt of one shard; True when an infrastructure error earns it (alone) one automatic retry."""
    out = shard_results_dir(ctx.settings.artifacts_dir, run.id, shard)
    plan = json.loads(shard.plan or "{}")
    specs = [s for s in plan.get("not_affected", []) if isinstance(s, str)]
    changed = {k: v for k, v in (plan.get("changed_env") or {}).items() if k == affected.CHANGED_FILES_ENV}
    dynamic = plan.get("dynamic") is True
    if dynamic and _nothing_left(ctx, job, shard, out):
        return False
    env = {**shard_env(shard.index, shard.count, plan.get("durations") or {}, dynamic), **not_affected_env(specs),
           **changed}
    note = (f"{plan.get('note', '')}compile-ci: shard {shard.index + 1} of {shard.count}, attempt {shard.attempt}"
            f"{'; it takes its tests while it runs (no recorded test times)' if dynamic else ''}\n")

    def selecting(_config: object, _mirror: Path, _checkout: Path) -> Selected:
        return Selected(env, note, grants=grants.channel(ctx, shard) if dynamic else None)

    def finish(result: RunResult, roots: list[str], checkout: Path, _selected: Selected) -> bool:
        return _finish(ctx, job, shard, out, result, roots, checkout)

    return pipeline.execute(ctx, run, job, out, shard.id, _ShardWatch(ctx, job, shard, lease, out), selecting,
                            finish)


def _nothing_left(ctx: WorkerContext, job: Job, shard: Shard, out: Path) -> bool:
    """A shard that takes its tests while it runs, started after its siblings took every one: completed as having
    run nothing, without a runner (a start is 3-8 s of a slot, and the next job's shards wait for that slot)."""
    try:
        if not ctx.claims.nothing_left(f"{job.id}:{job.attempt}", shard.index):
            return False
    except Exception:  # noqa: BLE001 - not known: it runs, and its own request for tests says the same
        return False
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    (out / "log.txt").write_text(f"compile-ci: shard {shard.index + 1} of {shard.count}: its sibling shards took "
                                 "every test before it started; it runs nothing.\n")
    outcome = Outcome(Conclusion.NEUTRAL, "No tests ran", "Its sibling shards took every test before it started.")
    replace_shard_results(ctx.store, job.id, job.attempt, shard.index, [])
    lifecycle.complete_shard(ctx.store, shard, outcome, kind_of(outcome))
    return True


def _finish(ctx: WorkerContext, job: Job, shard: Shard, out: Path, result: RunResult, roots: list[str],
            checkout: Path) -> bool:
    if result.infra_error and lifecycle.retry_shard_after_infra_error(ctx.store, shard, result.infra_error):
        log.warning("shard %s: infrastructure error, retrying it once: %s", shard.id, result.infra_error)
        return True
    attempt = read_attempt(out, roots, checkout, result.output)
    current = ctx.store.get_job(job.id)
    reason = current.detail if current is not None and current.cancel_requested else ""
    outcome = install.judged(out, result, attempt) or judge(result, attempt, reason, ctx.settings.output_mb)
    write_meta(out, result, ctx.runner.name, outcome, attempt)
    now = get_shard(ctx.store, shard.id)
    if now is None or now.state != JobState.RUNNING or now.attempt != shard.attempt:
        log.warning("shard %s attempt %d: no longer running; its result is not kept", shard.id, shard.attempt)
        return False
    replace_shard_results(ctx.store, job.id, job.attempt, shard.index, attempt.records)
    lifecycle.complete_shard(ctx.store, shard, outcome, kind_of(outcome))
    return False
