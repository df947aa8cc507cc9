"""Which results a job reuses, and from which job (its source), decided when the job starts, from its checkout.

The source is the one job a result may come from, chosen by trust, never by what happens to be stored:
  pull request  ->  its base job (the default branch's push run at its base sha, or the base run compile-ci made)
  base run      ->  the default branch's push run at the same sha
  push          ->  the push run of its branch's previous tip (the payload's `before`)
A pull request's own jobs (untrusted code, which writes its own surface.json and junit) are never a source, nor is
another repository's job: a fact only ever flows to a job as trusted as its source, or less. The canary reuses
nothing. What runs is decided statically here (service/planning/affected.py); the job's run-time fingerprint and every
key are checked against the source's when its results are taken (service/planning/reuse_check.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path

from service.planning import affected
from service.planning.base_runs import UnknownInstall, job_config
from service.planning.import_closure import ModuleIndex, TooLarge, closure
from service.planning.plan import builtin_suites
from service.planning.reuse_keys import Inputs, closure_digest, config_digest, group_keys, group_specs, suites_digest
from service.planning.worker import Planner
from service.repo_config import RepoConfig
from service.store import Job, Run, Store, job_id_for
from service.store.reuse import Planned, inputs_of, record_plan, refuted_before

log = logging.getLogger(__name__)
NULL_SHA = "0" * 40
# Whose results a run's jobs may reuse: only runs at least as trusted (DESIGN §11, §14).
SOURCE_TRIGGERS = {"pull_request": ("push", "base"), "base": ("push",), "push": ("push",)}
RESULTS = ("success", "failure")  # the conclusions of a job whose tests ran to the end


def may_serve(source: Run, consumer: Run) -> bool:
    """Whether `source`'s results may be shown as `consumer`'s: same repository, and a source trigger the consumer's
    trust admits."""
    return (source.id != consumer.id and source.repo_id == consumer.repo_id
            and source.repo_full_name == consumer.repo_full_name
            and source.trigger in SOURCE_TRIGGERS.get(consumer.trigger, ()))


def source_run_of(store: Store, run: Run) -> Run | None:
    if run.trigger == "pull_request":
        found = store.get_run(run.base_run_id) if run.base_run_id and run.base_sha != NULL_SHA else None
    elif run.trigger == "base":
        found = store.push_run_at(run.repo_full_name, run.head_sha)
    elif run.trigger == "push" and run.before_sha:
        found = store.push_run_at(run.repo_full_name, run.before_sha)
    else:
        found = None
    return found if found is not None and may_serve(found, run) else None


@dataclass(frozen=True)
class ReusePlan:
    decision: affected.Decision = field(default_factory=affected.Decision)
    source: str = ""  # the job whose results the groups left out carry (it need not exist yet: a run planning)
    source_run: str = ""
    changed: tuple[str, ...] | None = None  # the paths changed since the source's commit, when they were read


@dataclass(frozen=True)
class Decided:
    """A decision not yet recorded: what `record_reuse` stores for the attempt that runs it."""
    inputs: Inputs
    keys: dict[str, str]
    plan: ReusePlan


def plan_reuse(ctx: Planner, run: Run, job: Job, config: RepoConfig, mirror: Path,
               checkout: Path) -> ReusePlan:
    """Decide, and record (with this attempt's keys) before the job runs. Anything unsure runs everything."""
    return record_reuse(ctx.store, job.id, job.attempt, decide_reuse(ctx, run, job, config, mirror, checkout))


def decide_reuse(ctx: Planner, run: Run, job: Job, config: RepoConfig, mirror: Path, checkout: Path) -> Decided:
    """Decide, recording nothing: a sharded job decides before its attempt starts (its shard count is made from
    what is left: service/jobs/shard_plan.py) and records the same decision for the attempt that runs it."""
    inputs, plan = _reuse(ctx, run, job, config, mirror, checkout)
    return Decided(inputs, _keys(inputs, config, checkout), plan)


def record_reuse(store: Store, job_id: str, attempt: int, decided: Decided) -> ReusePlan:
    inputs, plan = decided.inputs, decided.plan
    record_plan(store, job_id, attempt, Planned(inputs.suites, inputs.build, inputs.device, inputs.torch,
                                                inputs.config, decided.keys, plan.source, plan.source_run,
                                                plan.decision.not_affected, plan.decision.line))
    return plan


def _reuse(ctx: Planner, run: Run, job: Job, config: RepoConfig, mirror: Path,
           checkout: Path) -> tuple[Inputs, ReusePlan]:
    inputs = Inputs(suites_digest(ctx.suites_dir), ctx.runner.build_id(job.device), job.device, job.torch,
                    config_digest(config))
    try:
        plan = _decide(ctx, run, job, config, mirror, checkout, inputs)
    except Exception as exc:  # noqa: BLE001 - whatever the pull request's files hold, the job runs, whole
        log.warning("job %s: reuse not decided (%s: %s); it runs whole", job.id, type(exc).__name__, exc)
        plan = ReusePlan(affected.everything(f"the change was not analysed ({type(exc).__name__})"))
    source = plan.source if plan.decision.not_affected else ""
    if source:
        plan = replace(plan, decision=replace(plan.decision, reason=f"{plan.decision.reason} Their results are "
                                              f"job {source}'s."))
    # The ops sweep aims at what a pull request changed (affected.changed_files_env); other runs sweep their scope.
    decision = replace(plan.decision, not_affected=plan.decision.not_affected if source else (),
                       changed=plan.decision.changed if run.trigger == "pull_request" else None)
    return inputs, ReusePlan(decision, source, plan.source_run if source else "",
                             plan.decision.changed if source else None)


def _keys(inputs: Inputs, config: RepoConfig, checkout: Path) -> dict[str, str]:
    """Every group's key at this checkout; a declared target whose closure cannot be read gets none."""
    closures: dict[str, str | None] = {}
    try:
        index = ModuleIndex.of_checkout(checkout)
        read = affected.checkout_reader(checkout)
        for spec in group_specs(config):
            closures[spec] = closure_digest(index, closure(index, spec.partition(":")[0], read), read)
    except (TooLarge, OSError, ValueError, RecursionError):
        closures = {}
    return group_keys(inputs, config, closures)


def _decide(ctx: Planner, run: Run, job: Job, config: RepoConfig, mirror: Path, checkout: Path,
            inputs: Inputs) -> ReusePlan:
    if job.suite == "repo":
        return ReusePlan(affected.everything("the repository's own tests may read any of its files"))
    refuted = refuted_before(ctx.store, job.id)
    if refuted:
        return ReusePlan(affected.everything(f"the results reused before did not hold ({refuted})"))
    source_run = source_run_of(ctx.store, run)
    if source_run is None:
        said = ("this pull request has no base job to take results from" if run.trigger == "pull_request" else
                "there is no earlier job of this suite to reuse results from")
        return ReusePlan(affected.Decision() if run.trigger == "canary" else affected.everything(said))
    source_id = job_id_for(source_run.id, job.suite, job.device, job.torch)
    source = ctx.store.get_job(source_id)
    if source is None and source_run.state != "planning":
        return ReusePlan(affected.everything(f"run {source_run.id} has no {job.check_name} job to reuse from"))
    if source is not None and source.state == "completed" and source.conclusion not in RESULTS:
        return ReusePlan(affected.everything(f"its source job {source.id} ended without test results "
                                             f"({source.title})"))
    started = inputs_of(ctx.store, source.id, source.attempt) if source is not None and source.attempt else None
    if started is not None:  # the source has started: inputs it does not share rule it out now, not later
        theirs = Inputs(started.suites, started.build, started.device, started.torch, started.config)
        differ = inputs.differences(theirs)
        if differ:
            return ReusePlan(affected.everything(f"job {source_id} ran with another {', '.join(differ)}"))
    if source_run.head_sha != run.head_sha:
        ctx.fetch_commit(run, source_run.head_sha)
    changed = (ctx.checkout.changed_paths(mirror, source_run.head_sha, run.head_sha)
               if source_run.head_sha != run.head_sha else [])
    try:
        theirs_config = job_config(ctx.checkout, mirror, source_run, builtin_suites(ctx.suites_dir))
    except UnknownInstall:
        theirs_config = []
    if isinstance(theirs_config, list):
        return ReusePlan(affected.everything(f"the config job {source_id} runs with cannot be read"))

    def read_source(path: str) -> bytes | None:
        text = ctx.checkout.read_file(mirror, source_run.head_sha, path)
        return text.encode() if text is not None else None

    decision = affected.decide_for_checkout(checkout, changed, config, theirs_config, read_source)
    return ReusePlan(replace(decision, changed=tuple(changed)), source_id, source_run.id)
