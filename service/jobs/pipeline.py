"""Running one job (cpu / cuda queues): claim it, fetch the head, run it in a runner, judge it, report it.

The flow, like a build agent's: lease -> start attempt -> checkout -> run (progress, cancel) -> judge -> complete
-> report last. An infrastructure error earns one automatic retry; everything the PR did is judged in outcome.py.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from runners.compile_cache import CacheScope, trust_class
from runners.job_log import TIMES_NAME, append_text
from runners.protocol import RunResult, RunSpec, ShouldCancel
from service.jobs import install, lifecycle
from service.jobs.context import WorkerContext
from service.jobs.lease import LEASE_TTL_S, LeaseKeeper, owner_of
from service.jobs.lifecycle import JobState
from service.jobs.outcome import judge, read_attempt, read_json, write_meta
from service.jobs.surface_file import read_fingerprint
from service.observability.worker import job_finished, job_started
from service.planning import affected, base_runs, torch_matrix
from service.planning.plan import builtin_suites, job_queue, ops_scope
from service.planning.reuse_plan import plan_reuse
from service.planning.reuse_whole import reused_whole
from service.planning.selection import Selected, not_affected_env, read_selection
from service.repo_config import RepoConfig
from service.store import Job, Run
from service.store.reuse import record_fingerprint
from service.store.shards import add_not_affected
from suites.shard_plan import GRANTS_ENV

log = logging.getLogger(__name__)


def run_job(ctx: WorkerContext, job_id: str) -> None:
    owner = owner_of(job_id)
    job = ctx.store.get_job(job_id)
    run = ctx.store.get_run(job.run_id) if job else None
    if job is None or run is None or job.state == JobState.COMPLETED:
        return
    if ctx.store.is_uninstalled(run.repo_full_name):
        # Completed in the store (nothing to report: GitHub no longer lets us), so the reaper never revives it.
        log.info("run_job %s: %s is no longer installed; dropping the job", job_id, run.repo_full_name)
        lifecycle.drop(ctx.store, job_id, "The App was removed from this repository; job dropped.")
        return
    if run.state == "planning":
        return  # a job shown while its head could not be fetched is not planned yet
    if job.cancel_requested:
        lifecycle.cancel(ctx.store, job_id, job.detail or "Cancelled before it started.")
        ctx.queue.report_job(job_id)
        return
    if not ctx.claims.acquire_lease(job_id, owner, LEASE_TTL_S):
        log.info("run_job %s: already running elsewhere (lease held)", job_id)
        return
    with LeaseKeeper(ctx.claims, job_id, owner) as lease:
        started = lifecycle.start(ctx.store, job_id, ctx.runner.name)
        if started is None:
            return
        job_started(started)
        tell(lambda: ctx.queue.report_job(job_id))
        retry = _execute(ctx, started, lease)
    if retry:  # only after the lease is gone, or the retry would find it held and drop itself
        tell(lambda: ctx.queue.run_job(job_id, job_queue(job.suite, job.device), first=True))
    tell(lambda: ctx.queue.report_job(job_id))


def tell(send: Callable[[], None]) -> None:
    """A message the broker did not take (Redis down) is not lost work: the reaper finds the job and sends it again."""
    try:
        send()
    except Exception as exc:
        log.warning("a message was not sent (the reaper sends it again): %s", exc)


class Watch:
    """The runner's ~1/s callback: publish progress now and then, and say when to stop (cancelled, or lease lost).
    A shard's (service/jobs/sharding.py) stops on more and publishes into its job's progress."""

    def __init__(self, ctx: WorkerContext, job: Job, lease: LeaseKeeper, out: Path) -> None:
        self.ctx, self.job, self.lease, self.out = ctx, job, lease, out
        self.last_published = time.monotonic()
        self.progress: tuple[int, int, str] | None = None

    def __call__(self) -> bool:
        if self.lease.lost:
            return True
        if time.monotonic() - self.last_published >= self.ctx.settings.progress_interval_seconds:
            self.last_published = time.monotonic()
            progress = read_progress(self.out)
            if progress != self.progress and progress[1]:
                self.progress = progress
                self.publish(progress)
        current = self.ctx.store.get_job(self.job.id)
        return current is None or current.cancel_requested or self.stops(current)

    def stops(self, current: Job) -> bool:
        return False

    def publish(self, progress: tuple[int, int, str]) -> None:
        if lifecycle.record_progress(self.ctx.store, self.job, *progress):
            tell(lambda: self.ctx.queue.report_job(self.job.id))


def _execute(ctx: WorkerContext, job: Job, lease: LeaseKeeper) -> bool:
    """Run one attempt; True when an infrastructure error earns it one automatic retry."""
    run = ctx.store.get_run(job.run_id)
    assert run is not None
    out = ctx.settings.artifacts_dir / run.id / job.id / str(job.attempt)

    def selecting(config: RepoConfig, mirror: Path, checkout: Path) -> Selected:
        plan = plan_reuse(ctx, run, job, config, mirror, checkout)
        decision = plan.decision
        return Selected({**not_affected_env(decision.not_affected), **affected.changed_files_env(job.suite,
                                                                                                 decision.changed)},
                        decision.line, reused_whole(ctx.store, job, plan.source, decision.not_affected, plan.changed))

    return execute(ctx, run, job, out, job.id, Watch(ctx, job, lease, out), selecting,
                   lambda result, roots, checkout, chosen: _finish(ctx, job, out, result, roots, checkout, chosen))


def execute(ctx: WorkerContext, run: Run, job: Job, out: Path, name: str, watch: ShouldCancel,
            selecting: Callable[[RepoConfig, Path, Path], Selected],
            finish: Callable[[RunResult, list[str], Path, Selected], bool]) -> bool:
    """A job's attempt, or one shard of it (`name`: its container, cache layer and work tree), in the runner; then
    `finish`, while the work tree (which locating failures in the repository's files needs) still exists."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    work = ctx.settings.data_dir / "work" / name
    roots: list[str] = []
    selected = Selected()
    try:
        try:
            _enough_space(ctx.settings.artifacts_dir, ctx.settings.output_mb)
            torch_matrix.check_runner(ctx.runner, job, ctx.settings)  # the job's torch, or an infrastructure error
            mirror = ctx.fetch(run)
            # A base run runs its head's config at the base sha, with the base's own [install] (base_runs.py).
            config = base_runs.job_config(ctx.checkout, mirror, run, builtin_suites(ctx.suites_dir))
            assert not isinstance(config, list), "planned jobs have a valid config"
            checkout = ctx.checkout.export(mirror, run.head_sha, work / "src")
            selected = selecting(config, mirror, checkout)
            if selected.whole is not None:  # nothing it imports changed: its source's tests are its own, unrun
                append_text(out / "log.txt", f"{selected.note}{selected.whole.line()}")
                return finish(RunResult(0, 0.0), roots, work / "src", selected)
            spec = _spec(ctx, run, job, config, checkout, out, name, selected)
            roots = [str(spec.checkout_dir), spec.env.get("COMPILE_CI_CHECKOUT", ""), *install.source_roots(out)]
            append_text(out / "log.txt", f"{selected.note}$ {' '.join(install.shown(spec.command))}\n")
            install.record_wheels(out, spec.deps_dir, config.requirements, ctx.settings.artifacts_dir, run.repo_id)
            result = ctx.runner.run(spec, watch)
        except install.InstallFailed as exc:  # the PR's requirements, not the service: no retry
            result = install.failed_result(out, exc)
        except base_runs.UnknownInstall as exc:  # the base commit's config: the repository's, not the service's
            result = install.failed_result(out, install.InstallFailed("config", exc.lines))
        except Exception as exc:  # the runner or checkout broke, not the PR
            log.exception("job %s: infrastructure error", name)
            result = RunResult(None, 0.0, infra_error=f"{type(exc).__name__}: {exc}")
        return finish(result, roots, work / "src", selected)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _spec(ctx: WorkerContext, run: Run, job: Job, config: RepoConfig, checkout: Path, out: Path, name: str,
          selected: Selected) -> RunSpec:
    # Worker paths throughout: LocalRunner uses them as they are, DockerRunner maps them to its mounts.
    pytest = pytest_command(ctx.runner.python, out / "junit.xml")
    if job.suite == "repo":
        command = [*pytest, "--rootdir", str(checkout), *(str(checkout / p) for p in config.repo_tests)]
    else:
        command = [*pytest, str(ctx.suites_dir / job.suite)]
    # The runner resolves it to this repository's cache, writable only by trusted runs (runners/compile_cache.py).
    cache = CacheScope(ctx.settings.cache_dir, str(run.repo_id), trust_class(run.trigger),
                       run.pr_number, ctx.settings.cache_cap_mb, ctx.settings.shared_cache_dir)
    env = {
        "COMPILE_CI_DEVICE": job.device,
        "COMPILE_CI_CHECKOUT": str(checkout),
        "COMPILE_CI_TARGETS": json.dumps(config.targets),
        "COMPILE_CI_OUTPUT_DIR": str(out),
        # A failing test is re-run this many times in the same job: failed-then-passed is "flaky" (suites/plugin.py).
        "COMPILE_CI_RERUNS": str(config.flaky_reruns),
        "COMPILE_CI_OPS_SCOPE": ops_scope(run.trigger),
        # Its compiled-vs-eager failures are bisected after its tests ran, never past the runner's limit (from now:
        # the job starts later, so this deadline is early rather than late). suites/bisect_session.py.
        "COMPILE_CI_BISECT_SECONDS": str(ctx.settings.bisect_seconds),
        "COMPILE_CI_DEADLINE": str(int(time.time()) + job.timeout_s),
        **selected.env,
        **({GRANTS_ENV: str(selected.grants.directory)} if selected.grants is not None else {}),
    }
    deps = install.prepare(ctx.settings, config.requirements, ctx.runner.cache_key(job.device))
    if deps is not None or config.install_package:
        command = install.wrap(command, ctx.runner.python, checkout, deps, config.install_package)
    return RunSpec(job_id=name, command=tuple(command), checkout_dir=checkout, output_dir=out,
                   timeout_s=job.timeout_s, device=job.device, env=env, cache=cache,
                   suites_dir=ctx.suites_dir, deps_dir=deps, output_mb=ctx.settings.output_mb, grants=selected.grants)


def pytest_command(python: str, junit: Path) -> list[str]:
    """How every job starts pytest, before its paths: through suites/pytest_entry.py, which takes the compiler
    surface's baseline before pytest imports any plugin. -v: each test's id as it starts (the log shows what is
    running), not a row of dots."""
    return [python, "-m", "suites.pytest_entry", "-v", "-p", "no:cacheprovider", "-p", "suites.plugin",
            "-o", "junit_family=xunit1", f"--junitxml={junit}"]


# Room the worker keeps on the artifacts volume beyond one job's quota (logs, meta, the next job's copy).
SPARE_MB = 256


def _enough_space(artifacts: Path, output_mb: int) -> None:
    """A full artifacts volume is the service's problem, said as such (not a worker lost mid-copy, twice)."""
    free_mb = shutil.disk_usage(artifacts).free // (1024 * 1024)
    if free_mb < output_mb + SPARE_MB:
        raise OSError(f"the artifacts volume has {free_mb} MB free; a job may need {output_mb} MB "
                      f"(COMPILE_CI_OUTPUT_MB) + {SPARE_MB} MB: free space or lower the quota")


def read_progress(out: Path) -> tuple[int, int, str]:
    """(done, total, current test) from the job's progress.json: its values are the job's, checked for type."""
    data = read_json(out / "progress.json")
    done, total, current = data.get("done", 0), data.get("total", 0), data.get("current", "")

    def count(value: object) -> int:
        return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**9 else 0

    return count(done), count(total), current[:500] if isinstance(current, str) else ""


def artifact_index(out: Path) -> list[tuple[str, int]]:
    """(path, size) of every file in the results directory: only regular files are there (runners/outbox.py)."""
    found = []
    for root, _dirs, files in os.walk(out):
        for name in files:
            if root == str(out) and name == TIMES_NAME:  # the log viewer's index of log.txt, not an artifact
                continue
            info = os.lstat(os.path.join(root, name))
            found.append((os.path.relpath(os.path.join(root, name), out), info.st_size))
    return sorted(found)


def _finish(ctx: WorkerContext, job: Job, out: Path, result: RunResult, roots: list[str], checkout: Path,
            selected: Selected) -> bool:
    if result.infra_error and lifecycle.retry_after_infra_error(ctx.store, job, result.infra_error):
        log.warning("job %s: infrastructure error, retrying once: %s", job.id, result.infra_error)
        return True
    attempt = read_attempt(out, roots, checkout, result.output)
    current = ctx.store.get_job(job.id)
    # Why it was cancelled (a newer push, /cancel), set while it ran.
    outcome = install.judged(out, result, attempt) or judge(
        result, attempt, current.detail if current is not None and current.cancel_requested else "",
        ctx.settings.output_mb)
    if selected.whole is not None:
        outcome = replace(outcome, torch_version=selected.whole.torch_version)
    write_meta(out, result, ctx.runner.name, outcome, attempt)
    job_finished(job, outcome.conclusion, result, attempt.records)
    ctx.store.replace_results(job.id, job.attempt, attempt.records)
    if selected.whole is not None:  # no runner: every test is the source's, under its fingerprint (reuse_whole.py)
        add_not_affected(ctx.store, job.id, job.attempt, selected.whole.nodeids)
        record_fingerprint(ctx.store, job.id, job.attempt, selected.whole.fingerprint)
    else:
        if selected.asked_not_affected:  # only what the service left out: the job cannot add to it
            add_not_affected(ctx.store, job.id, job.attempt, read_selection(out).not_affected)
        record_fingerprint(ctx.store, job.id, job.attempt, read_fingerprint(out))
    ctx.store.replace_artifacts(job.id, job.attempt, artifact_index(out))
    if lifecycle.complete(ctx.store, job, outcome) is None:
        log.warning("job %s attempt %d: no longer running; its result is kept but not reported", job.id, job.attempt)
    return False
