"""The job lifecycle in one place: plan a run (or wait for approval), run a job. Called by the Celery tasks."""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from runners.checkout import Checkout
from runners.compile_cache import CacheScope, trust_class
from runners.protocol import Runner, RunResult, RunSpec
from service.celery_app import CeleryQueue
from service.config import Settings
from service.github import reporting
from service.github.annotations import locate_in_checkout
from service.github.api import GitHubApp
from service.jobs.junit import JUnitError, parse_junit
from service.jobs.planning import PlannedJob, builtin_suites, plan_jobs
from service.jobs.repo_config import CONFIG_FILE, RepoConfig, default_config, parse_repo_config
from service.store import APPROVAL_SUITE, Job, Run, Store, TestRecord, job_id_for, utcnow
from service.store.claims import Claims
from suites.naming import sanitise_nodeid

log = logging.getLogger(__name__)
LEASE_TTL_S = 60
INFRA_TITLE = "Infrastructure error — not a test failure"
WAITING_DETAIL = (
    "Nothing has run: @{author} is not a member or collaborator of this repository, so their code runs only "
    "after someone with write access has read it and commented `/ok-to-test`. That approves commit {sha} only; "
    "a later push needs a new approval."
)


@dataclass
class WorkerContext:
    settings: Settings
    store: Store
    claims: Claims
    github: GitHubApp
    queue: CeleryQueue
    runner: Runner
    checkout: Checkout
    suites_dir: Path

    def job_url(self, job_id: str) -> str:
        return f"{self.settings.public_url}/jobs/{job_id}"

    def fetch(self, run: Run) -> Path:
        """Make the run's head sha present locally; the token (if any) lives only in this call."""
        template = self.settings.clone_url_template
        url = template.format(full_name=run.repo_full_name) if template else run.clone_url
        token = self.github.installation_token(run.installation_id) if url.startswith("https://") else None
        return self.checkout.fetch(url, run.head_sha, key=str(run.repo_id), token=token)


# --- planning ---------------------------------------------------------------------------------------


def plan_run(ctx: WorkerContext, run_id: str) -> None:
    run = ctx.store.get_run(run_id)
    if run is None:
        log.warning("plan_run: run %s does not exist", run_id)
        return
    if dropped(ctx, run):
        return
    if run.gate == "waiting":
        _await_approval(ctx, run)
        return
    if run.state == "planning":
        _plan(ctx, run)
    for job in ctx.store.jobs_of(run.id):
        if job.check_run_id is None:
            # Created here, before the job can be started: every check run shows "queued" first. A GitHub error
            # retries this task; jobs whose check run exists are then only (re-)enqueued, which their lease dedupes.
            reporting.report_job(ctx, job.id)
        if job.state == "queued":
            ctx.queue.run_job(job.id, job.device)


def dropped(ctx: WorkerContext, run: Run) -> bool:
    """Work for a repository the App was removed from, or for a head that a newer push replaced, is dropped."""
    if ctx.store.is_uninstalled(run.repo_full_name):
        log.info("run %s: %s is no longer installed; dropping its work", run.id, run.repo_full_name)
        return True
    if run.cancelled_reason:
        log.info("run %s: cancelled (%s); not planning it", run.id, run.cancelled_reason)
        return True
    return False


def _await_approval(ctx: WorkerContext, run: Run) -> None:
    """One check run says the PR waits for a maintainer; nothing is fetched or run until /ok-to-test."""
    job = Job(id=job_id_for(run.id, APPROVAL_SUITE, "none"), run_id=run.id, suite=APPROVAL_SUITE, device="none",
              timeout_s=0, attempt=0, state="completed", conclusion="action_required", finished_at=utcnow(),
              reported="", passed=0, failed=0, skipped=0, errors=0, title="Waiting for approval",
              detail=WAITING_DETAIL.format(author=run.author or "the author", sha=run.head_sha[:12]))
    ctx.store.add_jobs_if_absent([job])
    ctx.store.update_run(run.id, state="waiting")
    ctx.queue.report_job(job.id)


def _approved(ctx: WorkerContext, run: Run) -> None:
    """The waiting check run is replaced by a new, green one naming who approved which commit."""
    approval_id = job_id_for(run.id, APPROVAL_SUITE, "none")
    if ctx.store.reset_for_rerun(approval_id) is not None:
        ctx.store.update_job(approval_id, state="completed", conclusion="success", finished_at=utcnow(),
                             title=f"Approved by @{run.approved_by}",
                             detail=f"@{run.approved_by} approved {run.head_sha[:12]} with `/ok-to-test`. "
                                    "A new push needs a new approval.")
        ctx.queue.report_job(approval_id)


def _plan(ctx: WorkerContext, run: Run) -> None:
    suites = builtin_suites(ctx.suites_dir)
    mirror = ctx.fetch(run)
    parsed = parse_repo_config(ctx.checkout.read_file(mirror, run.head_sha, CONFIG_FILE), suites)
    config_error = None
    if isinstance(parsed, list):
        # Still one check run per default job, each saying what is wrong: the author sees the error
        # where the results would have been, and nothing runs on a config we cannot read.
        config_error = "\n".join(p.render() for p in parsed)
        parsed = default_config(suites)
    planned = plan_jobs(parsed, ctx.settings.devices, ctx.settings.max_job_minutes)
    ctx.store.add_jobs_if_absent(_job_row(run, p, config_error) for p in planned)
    ctx.store.update_run(run.id, state="planned", config_error=config_error)
    if run.gate == "approved":
        _approved(ctx, run)


def _job_row(run: Run, planned: PlannedJob, config_error: str | None) -> Job:
    job = Job(id=job_id_for(run.id, planned.suite, planned.device), run_id=run.id, suite=planned.suite,
              device=planned.device, timeout_s=planned.timeout_s, attempt=0, state="queued", reported="",
              passed=0, failed=0, skipped=0, errors=0, title="", detail="")
    if config_error is not None:
        job.state, job.conclusion, job.finished_at = "completed", "failure", utcnow()
        job.title = f"Invalid {CONFIG_FILE}"
        job.detail = f"Nothing ran: {CONFIG_FILE} has problems.\n\n```\n{config_error}\n```"
    elif planned.skip_reason is not None:
        job.state, job.conclusion, job.finished_at = "completed", "neutral", utcnow()
        job.title = f"Not run: no {planned.device} runner"
        job.detail = planned.skip_reason
    return job


# --- running ----------------------------------------------------------------------------------------


def run_job(ctx: WorkerContext, job_id: str) -> None:
    owner = f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}:{job_id}"
    job = ctx.store.get_job(job_id)
    run = ctx.store.get_run(job.run_id) if job else None
    if job is None or run is None or job.state == "completed":
        return
    if ctx.store.is_uninstalled(run.repo_full_name):
        # Completed in the store (nothing to report: GitHub no longer lets us), so the reaper never revives it.
        log.info("run_job %s: %s is no longer installed; dropping the job", job_id, run.repo_full_name)
        if ctx.store.cancel_job(job_id, "The App was removed from this repository; job dropped.") == "cancelled":
            ctx.store.update_job(job_id, reported="completed")  # nothing left to tell GitHub
        return
    if job.cancel_requested:
        ctx.store.cancel_job(job_id, job.detail or "Cancelled before it started.")
        ctx.queue.report_job(job_id)
        return
    if not ctx.claims.acquire_lease(job_id, owner, LEASE_TTL_S):
        log.info("run_job %s: already running elsewhere (lease held)", job_id)
        return
    retry = False
    try:
        started = ctx.store.start_attempt(job_id, ctx.runner.name)
        if started is None:
            return
        ctx.queue.report_job(job_id)
        retry = _execute(ctx, started, owner)
    finally:
        ctx.claims.release_lease(job_id, owner)
    if retry:  # only after the lease is gone, or the retry would find it held and drop itself
        ctx.queue.run_job(job_id, job.device)
    ctx.queue.report_job(job_id)


class _Watch:
    """The runner's ~1/s callback: keep the lease, publish progress now and then, and say when to cancel."""

    def __init__(self, ctx: WorkerContext, job: Job, owner: str, out: Path) -> None:
        self.ctx, self.job, self.owner, self.out = ctx, job, owner, out
        self.last_published = time.monotonic()
        self.progress: tuple[int, int, str] | None = None

    def __call__(self) -> bool:
        self.ctx.claims.refresh_lease(self.job.id, self.owner, LEASE_TTL_S)
        if time.monotonic() - self.last_published >= self.ctx.settings.progress_interval_seconds:
            self.last_published = time.monotonic()
            self._publish_progress()
        current = self.ctx.store.get_job(self.job.id)
        return current is None or current.cancel_requested

    def _publish_progress(self) -> None:
        data = _read_json(self.out / "progress.json")
        progress = (int(data.get("done", 0)), int(data.get("total", 0)), str(data.get("current", "")))  # type: ignore[call-overload]
        if progress != self.progress and progress[1]:
            self.progress = progress
            self.ctx.store.update_job(self.job.id, progress_done=progress[0], progress_total=progress[1],
                                      progress_current=progress[2])
            self.ctx.queue.report_job(self.job.id)


def _execute(ctx: WorkerContext, job: Job, owner: str) -> bool:
    """Run one attempt; True when an infrastructure error earns it one automatic retry."""
    run = ctx.store.get_run(job.run_id)
    assert run is not None
    out = ctx.settings.artifacts_dir / run.id / job.id / str(job.attempt)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    work = ctx.settings.data_dir / "work" / job.id
    roots: list[str] = []
    try:
        try:
            mirror = ctx.fetch(run)
            text = ctx.checkout.read_file(mirror, run.head_sha, CONFIG_FILE)
            config = parse_repo_config(text, builtin_suites(ctx.suites_dir))
            assert not isinstance(config, list), "planned jobs have a valid config"
            checkout = ctx.checkout.export(mirror, run.head_sha, work / "src")
            spec = _spec(ctx, job, config, checkout, out)
            roots = [str(spec.checkout_dir), spec.env.get("COMPILE_CI_CHECKOUT", "")]
            (out / "log.txt").write_text(f"$ {' '.join(spec.command)}\n")
            result = ctx.runner.run(spec, _Watch(ctx, job, owner, out))
        except Exception as exc:  # the runner or checkout broke, not the PR
            log.exception("job %s: infrastructure error", job.id)
            result = RunResult(None, 0.0, infra_error=f"{type(exc).__name__}: {exc}")
        # Before the work tree goes: locating failures in the repository's files needs them.
        return _finish(ctx, job, out, result, roots, work / "src")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _spec(ctx: WorkerContext, job: Job, config: RepoConfig, checkout: Path, out: Path) -> RunSpec:
    # Worker paths throughout: LocalRunner uses them as they are, DockerRunner maps them to its mounts.
    pytest = [ctx.runner.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "suites.plugin",
              "-o", "junit_family=xunit1", f"--junitxml={out / 'junit.xml'}"]
    if job.suite == "repo":
        command = [*pytest, "--rootdir", str(checkout), *(str(checkout / p) for p in config.repo_tests)]
    else:
        command = [*pytest, str(ctx.suites_dir / job.suite)]
    run = ctx.store.get_run(job.run_id)
    assert run is not None
    # The runner resolves it to this repository's cache, writable only by trusted runs (runners/compile_cache.py).
    cache = CacheScope(ctx.settings.data_dir / "cache", str(run.repo_id), trust_class(run.trigger, run.gate),
                       run.pr_number, ctx.settings.cache_cap_mb)
    env = {
        "COMPILE_CI_DEVICE": job.device,
        "COMPILE_CI_CHECKOUT": str(checkout),
        "COMPILE_CI_TARGETS": json.dumps(config.targets),
        "COMPILE_CI_OUTPUT_DIR": str(out),
    }
    return RunSpec(job_id=job.id, command=tuple(command), checkout_dir=checkout, output_dir=out,
                   timeout_s=job.timeout_s, device=job.device, env=env, cache=cache,
                   suites_dir=ctx.suites_dir)


def _finish(ctx: WorkerContext, job: Job, out: Path, result: RunResult, roots: list[str], checkout: Path) -> bool:
    if result.infra_error and job.infra_failures == 0 and not job.cancel_requested:
        log.warning("job %s: infrastructure error, retrying once: %s", job.id, result.infra_error)
        ctx.store.update_job(job.id, state="queued", infra_failures=1, title="Retrying after an infrastructure error",
                             detail=result.infra_error, started_at=None)
        return True
    records: list[TestRecord] = []
    junit_problem = None
    if (out / "junit.xml").exists():
        try:
            records = [_with_metrics(_located(r, roots, checkout), out) for r in parse_junit(out / "junit.xml")]
        except JUnitError as exc:
            junit_problem = str(exc)
    counts = {k: sum(r.outcome == k for r in records) for k in ("passed", "failed", "skipped", "error")}
    conclusion, title, detail = _judge(result, counts, junit_problem)
    current = ctx.store.get_job(job.id)
    if conclusion == "cancelled" and current is not None and current.detail:
        detail = current.detail  # why it was cancelled (a newer push, /cancel), set while it ran
    env_info = _read_json(out / "environment.json")
    meta = {"exit_code": result.exit_code, "duration_s": round(result.duration_s, 3), "runner": ctx.runner.name,
            "timed_out": result.timed_out, "oom": result.oom, "infra_error": result.infra_error,
            "conclusion": conclusion, **env_info}
    (out / "meta.json").write_text(json.dumps(meta, indent=2))
    ctx.store.replace_results(job.id, job.attempt, records)
    files = sorted(p for p in out.rglob("*") if p.is_file())
    ctx.store.replace_artifacts(job.id, job.attempt, [(str(p.relative_to(out)), p.stat().st_size) for p in files])
    ctx.store.update_job(
        job.id, state="completed", conclusion=conclusion, title=title, detail=detail, finished_at=utcnow(),
        passed=counts["passed"], failed=counts["failed"], skipped=counts["skipped"], errors=counts["error"],
        torch_version=str(env_info.get("torch_version", "")),
    )
    return False


def _with_metrics(record: TestRecord, out: Path) -> TestRecord:
    """The suite plugin's compile metrics of this test, kept in the store so pages need not read thousands of files."""
    metrics = _read_json(out / "tests" / sanitise_nodeid(record.nodeid) / "metrics.json")
    return replace(record, metrics=metrics) if metrics else record


def _located(record: TestRecord, roots: list[str], checkout: Path) -> TestRecord:
    if record.outcome not in ("failed", "error"):
        return record
    where = locate_in_checkout(record.details, [r for r in roots if r], lambda rel: (checkout / rel).is_file())
    return record if where is None else replace(record, repo_path=where[0], repo_line=where[1])


def _judge(result: RunResult, counts: dict[str, int], junit_problem: str | None) -> tuple[str, str, str]:
    """(conclusion, title, detail): the outcomes a maintainer must be able to tell apart."""
    failed = counts["failed"] + counts["error"]
    if result.infra_error:
        return "failure", INFRA_TITLE, result.infra_error
    if result.cancelled:
        return "cancelled", "Cancelled", "The job was cancelled before it finished."
    if result.timed_out:
        return "timed_out", "Timed out", f"Killed at the job's time limit after {result.duration_s:.0f} s."
    if result.oom:
        return "failure", "Out of memory", "The job was killed for exceeding its memory limit."
    if result.exit_code == 5:
        return "neutral", "No tests ran", "pytest collected no tests."
    if result.exit_code in (0, 1) and junit_problem is None:
        if result.exit_code == 0 and failed == 0:
            return "success", f"{counts['passed']} passed, {counts['skipped']} skipped", ""
        return "failure", f"{failed} failed, {counts['passed']} passed, {counts['skipped']} skipped", ""
    detail = junit_problem or "see the log"
    return "failure", f"pytest exited with code {result.exit_code}", f"The test run did not complete: {detail}."


def _read_json(path: Path) -> dict[str, object]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
