"""The job lifecycle in one place: plan a run, run a job, report a job. Called by the Celery tasks."""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path

from runners.checkout import Checkout
from runners.protocol import Runner, RunResult, RunSpec
from service.celery_app import CeleryQueue
from service.checks import render_check_run
from service.claims import Claims
from service.config import Settings
from service.github_api import GitHubApp, GoneError
from service.junit import JUnitError, parse_junit
from service.planning import PlannedJob, builtin_suites, plan_jobs
from service.repo_config import CONFIG_FILE, RepoConfig, default_config, parse_repo_config
from service.store import Job, Run, Store, TestRecord, job_id_for, utcnow

log = logging.getLogger(__name__)
LEASE_TTL_S = 60
INFRA_TITLE = "Infrastructure error — not a test failure"


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
    if run.state == "planning":
        _plan(ctx, run)
    for job in ctx.store.jobs_of(run.id):
        if job.check_run_id is None:
            report_job(ctx, job.id)
        if job.state == "queued":
            ctx.queue.run_job(job.id, job.device)


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
    owner = f"{socket.gethostname()}:{os.getpid()}:{job_id}"
    job = ctx.store.get_job(job_id)
    if job is None or job.state == "completed":
        return
    if not ctx.claims.acquire_lease(job_id, owner, LEASE_TTL_S):
        log.info("run_job %s: already running elsewhere (lease held)", job_id)
        return
    try:
        started = ctx.store.start_attempt(job_id, ctx.runner.name)
        if started is None:
            return
        ctx.queue.report_job(job_id)
        _execute(ctx, started, owner)
    finally:
        ctx.claims.release_lease(job_id, owner)
    ctx.queue.report_job(job_id)


def _execute(ctx: WorkerContext, job: Job, owner: str) -> None:
    run = ctx.store.get_run(job.run_id)
    assert run is not None
    out = ctx.settings.artifacts_dir / run.id / job.id / str(job.attempt)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    work = ctx.settings.data_dir / "work" / job.id
    try:
        mirror = ctx.fetch(run)
        text = ctx.checkout.read_file(mirror, run.head_sha, CONFIG_FILE)
        config = parse_repo_config(text, builtin_suites(ctx.suites_dir))
        assert not isinstance(config, list), "planned jobs have a valid config"
        checkout = ctx.checkout.export(mirror, run.head_sha, work / "src")
        spec = _spec(ctx, job, config, checkout, out)
        (out / "log.txt").write_text(f"$ {' '.join(spec.command)}\n")

        def keep_lease() -> bool:
            ctx.claims.refresh_lease(job.id, owner, LEASE_TTL_S)
            return False

        result = ctx.runner.run(spec, keep_lease)
    except Exception as exc:  # the runner or checkout broke, not the PR
        log.exception("job %s: infrastructure error", job.id)
        result = RunResult(None, 0.0, infra_error=f"{type(exc).__name__}: {exc}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _finish(ctx, job, out, result)


def _spec(ctx: WorkerContext, job: Job, config: RepoConfig, checkout: Path, out: Path) -> RunSpec:
    # Worker paths throughout: LocalRunner uses them as they are, DockerRunner maps them to its mounts.
    pytest = [ctx.runner.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "suites.plugin",
              "-o", "junit_family=xunit1", f"--junitxml={out / 'junit.xml'}"]
    if job.suite == "repo":
        command = [*pytest, "--rootdir", str(checkout), *(str(checkout / p) for p in config.repo_tests)]
    else:
        command = [*pytest, str(ctx.suites_dir / job.suite)]
    cache = ctx.settings.data_dir / "cache" / ctx.runner.cache_key(job.device)
    env = {
        "COMPILE_CI_DEVICE": job.device,
        "COMPILE_CI_CHECKOUT": str(checkout),
        "COMPILE_CI_TARGETS": json.dumps(config.targets),
        "COMPILE_CI_OUTPUT_DIR": str(out),
        # Compile caches outlive the job: a rerun of the same code skips inductor's C++/Triton builds.
        "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
        "TRITON_CACHE_DIR": str(cache / "triton"),
    }
    return RunSpec(job_id=job.id, command=tuple(command), checkout_dir=checkout, output_dir=out,
                   timeout_s=job.timeout_s, device=job.device, env=env, cache_dir=cache,
                   suites_dir=ctx.suites_dir)


def _finish(ctx: WorkerContext, job: Job, out: Path, result: RunResult) -> None:
    records: list[TestRecord] = []
    junit_problem = None
    if (out / "junit.xml").exists():
        try:
            records = parse_junit(out / "junit.xml")
        except JUnitError as exc:
            junit_problem = str(exc)
    counts = {k: sum(r.outcome == k for r in records) for k in ("passed", "failed", "skipped", "error")}
    conclusion, title, detail = _judge(result, counts, junit_problem)
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


# --- reporting --------------------------------------------------------------------------------------


def report_job(ctx: WorkerContext, job_id: str) -> None:
    with ctx.claims.report_lock(job_id):
        job = ctx.store.get_job(job_id)
        run = ctx.store.get_run(job.run_id) if job else None
        if job is None or run is None or job.reported == "completed":
            return  # a completed check run is never moved back
        results = ctx.store.results_of(job.id, job.attempt) if job.state == "completed" else []
        view = render_check_run(run, job, results, ctx.job_url(job.id))
        if view.status == job.reported:
            return
        try:
            if job.check_run_id is None:
                check_run_id = ctx.github.create_check_run(run.installation_id, run.repo_full_name, view)
                ctx.store.update_job(job.id, check_run_id=check_run_id, reported=view.status)
            else:
                ctx.github.update_check_run(run.installation_id, run.repo_full_name, job.check_run_id, view)
                ctx.store.update_job(job.id, reported=view.status)
        except GoneError as exc:
            log.info("report_job %s: %s; not reporting further", job.id, exc)
            ctx.store.update_job(job.id, reported="completed")

