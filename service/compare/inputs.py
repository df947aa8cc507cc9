"""What judging a head job needs, read from the store and the artifacts: its base job's results and code."""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path

from runners.untrusted_files import read_head
from service.compare import codediff
from service.compare.bisection import Bisection, read_bisections
from service.compare.budgets import Budgets, parse_budgets
from service.compare.history import FLAKY_WINDOW, HistorySummary, KnownFlaky, known_flaky, summaries
from service.compare.judgement import BaseInfo, BaseStatus, Judgement, judge
from service.store import Job, Run, Store, TestResult, job_id_for, utcnow
from service.store.history import TestRun, results_across_runs
from suites.naming import sanitise_nodeid

NULL_SHA = "0" * 40
MAX_CODE_FILES = 64  # per test: more graphs than that are compared by their first 64
MAX_CODE_BYTES = 2_000_000  # per file: the job wrote it; a larger one is compared by its size alone


def judge_job(store: Store, artifacts_dir: Path, run: Run, job: Job, results: list[TestResult],
              job_url: Callable[[str], str], culprits: Mapping[str, Bisection] | None = None) -> Judgement | None:
    """None for a run that has no base (a push, a base run, a pull request opened before bases were kept).
    `culprits`: the failing tests' bisections (service/compare/bisection.py), read from the job's files if not
    given."""
    if run.trigger != "pull_request" or not run.base_sha or run.base_sha == NULL_SHA:
        return None
    if culprits is None:
        culprits = read_bisections(artifacts_dir / run.id / job.id / str(job.attempt) / "tests",
                                   [r.nodeid for r in results if r.outcome in ("failed", "error")])
    flaky, history = history_of(store, run, job, results)
    base_run = store.get_run(run.base_run_id) if run.base_run_id else None
    kind = "push run" if base_run is not None and base_run.trigger == "push" else "base run"
    base_job = store.get_job(job_id_for(base_run.id, job.suite, job.device, job.torch)) if base_run else None
    if base_run is None or base_job is None:
        # A base run not planned yet has its jobs to come, as a pull request not planned yet has its base.
        planning = base_run.state == "planning" if base_run is not None else run.state != "planned"
        status = BaseStatus.PENDING if planning else BaseStatus.NONE
        return judge(results, None, BaseInfo(status, run.base_sha), budgets_of(run), flaky=flaky, history=history,
                     culprits=culprits)
    info = BaseInfo(BaseStatus.READY, run.base_sha, base_run.id, kind, url=job_url(base_job.id))
    if base_job.state != "completed":
        return judge(results, None, _with(info, BaseStatus.PENDING), budgets_of(run), flaky=flaky, history=history,
                     culprits=culprits)
    base_results = store.results_of(base_job.id, base_job.attempt)
    usable = base_job.conclusion in ("success", "failure") and base_results
    if not usable:
        return judge(results, None, _with(info, BaseStatus.BROKEN, base_job.title), budgets_of(run), flaky=flaky,
                     history=history, culprits=culprits)
    head_dir = artifacts_dir / run.id / job.id / str(job.attempt) / "tests"
    base_dir = artifacts_dir / base_run.id / base_job.id / str(base_job.attempt) / "tests"

    def code_changed(nodeid: str) -> bool:
        name = sanitise_nodeid(nodeid)
        base_codes, head_codes = read_codes(base_dir / name), read_codes(head_dir / name)
        return bool(base_codes or head_codes) and codediff.changed(base_codes, head_codes)

    return judge(results, base_results, info, budgets_of(run), code_changed, flaky, history, culprits)


def history_of(store: Store, run: Run, job: Job, results: list[TestResult]
               ) -> tuple[dict[str, KnownFlaky], dict[str, HistorySummary]]:
    """The head's failing tests that are known flaky, and where else each fails now (the default branch, other pull
    requests), from the repository's other runs of the last FLAKY_WINDOW that finished before this job did, in one
    query: judging it again later (its base finished) sees the same evidence, whatever ran since."""
    failing = [r.nodeid for r in results if r.outcome in ("failed", "error")]
    if not failing:
        return {}, {}
    now = job.finished_at or utcnow()
    runs = evidence_of(store, run, job.suite, job.device, job.torch, now, failing)
    return known_flaky(runs, now, exclude_pr=run.pr_number), summaries(runs, exclude_pr=run.pr_number)


def evidence_of(store: Store, run: Run, suite: str, device: str, torch: str, when: datetime,
                nodeids: list[str]) -> list[TestRun]:
    """What judging a job of `run` that finished `when` reads of `nodeids`' history (newest first): the
    repository's other runs of the last FLAKY_WINDOW that finished by then. The test page reads the same."""
    return [r for r in results_across_runs(store, run.repo_full_name, suite, device, nodeids,
                                           since=when - FLAKY_WINDOW, before=when, torch=torch)
            if r.run_id != run.id]


def _with(info: BaseInfo, status: BaseStatus, reason: str = "") -> BaseInfo:
    return BaseInfo(status, info.sha, info.run_id, info.kind, reason, info.url)


def budgets_of(run: Run) -> Budgets:
    """The head's `[budgets]`; none when its config is absent or invalid (its jobs then say so themselves)."""
    budgets, problems = parse_budgets(config_table(run.config_text, "budgets"))
    return Budgets() if problems else budgets


def config_table(text: str | None, name: str) -> dict[str, object]:
    try:
        table = tomllib.loads(text or "").get(name, {})
    except tomllib.TOMLDecodeError:
        return {}
    return table if isinstance(table, dict) else {}


def read_codes(directory: Path) -> list[str]:
    """A test's generated code files in graph order (output_code_0.py, output_code_1.py, ...)."""
    codes = []
    for index in range(MAX_CODE_FILES):
        try:  # the job wrote them: a plain file or nothing (runners/untrusted_files.py)
            raw, size = read_head(directory, f"output_code_{index}.py", MAX_CODE_BYTES)
        except OSError:
            break
        codes.append(raw.decode(errors="replace") if size <= MAX_CODE_BYTES else f"<{size} bytes>")
    return codes
