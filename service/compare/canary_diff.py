"""What the advisory torch breaks that the default one does not: a canary job against the same commit's push job on
the default version (new failures, graph breaks and recompiles added, compile-time ratios), for the `/canary` page."""

from __future__ import annotations

from dataclasses import dataclass, field

from service.compare.budgets import Budgets
from service.compare.judgement import BaseInfo, BaseStatus, Delta, TestJudgement, judge
from service.compare.verdicts import Verdict
from service.store import Job, Run, Store, job_id_for

MIN_TIMED_S = 0.05  # compile times under this on the default torch are noise, not a ratio's denominator
SLOWEST_SHOWN = 5


@dataclass(frozen=True)
class CanaryJob:
    job: Job  # on the advisory torch
    baseline: Job | None  # the same (suite, device) of the push run at the same commit, on the default torch
    status: str  # "compared", or why not (still running, no baseline, a job that ended without results)
    new_failures: list[str] = field(default_factory=list)  # fail on the advisory torch, pass (or absent) on the default
    graph_breaks: list[Delta] = field(default_factory=list)  # tests whose graph breaks grew
    recompiles: list[Delta] = field(default_factory=list)
    compile_ratio: float | None = None  # summed compile time, advisory ÷ default, over tests timed on both
    slowest: list[tuple[str, float]] = field(default_factory=list)  # the tests whose compile time grew most (ratio)

    @property
    def breaks_something(self) -> bool:
        return bool(self.new_failures or self.graph_breaks or self.recompiles)


def compare_canary(store: Store, canary: Run) -> list[CanaryJob]:
    """Every job of a canary run against its baseline (the push run at its commit, on the default torch)."""
    push = store.push_run_at(canary.repo_full_name, canary.head_sha)
    return [_compare_job(store, job, push) for job in store.jobs_of(canary.id)]


def _compare_job(store: Store, job: Job, push: Run | None) -> CanaryJob:
    baseline = store.get_job(job_id_for(push.id, job.suite, job.device)) if push is not None else None
    if job.state != "completed":
        return CanaryJob(job, baseline, f"{job.state} on the advisory torch")
    if baseline is None:
        return CanaryJob(job, None, "no push run of this commit on the default torch to compare with")
    if baseline.state != "completed":
        return CanaryJob(job, baseline, f"the default torch's job is {baseline.state}")
    head = store.results_of(job.id, job.attempt)
    base = store.results_of(baseline.id, baseline.attempt)
    if not head or not base:
        side = job if not head else baseline
        return CanaryJob(job, baseline, f"no test results to compare: {side.check_name} ended \u201c{side.title}\u201d")
    judged = judge(head, base, BaseInfo(BaseStatus.READY), Budgets())
    new = [t.nodeid for t in judged.tests if t.verdict in (Verdict.NEW_FAILURE, Verdict.FAILED)]
    grew = [d for d in judged.deltas if d.head > d.base]
    ratios = sorted(((t.nodeid, head / base) for t, head, base in _timed_on_both(judged.tests)),
                    key=lambda pair: (-pair[1], pair[0]))
    return CanaryJob(job, baseline, "compared", new,
                     [d for d in grew if d.figure == "graph_breaks"], [d for d in grew if d.figure == "recompiles"],
                     _total_ratio(judged.tests), ratios[:SLOWEST_SHOWN])


def _timed_on_both(tests: list[TestJudgement]) -> list[tuple[TestJudgement, float, float]]:
    """(test, advisory seconds, default seconds) of the tests that compiled measurably on both."""
    found = []
    for test in tests:
        head, base = test.head.compile_time_s, test.base.compile_time_s if test.base is not None else None
        if head is not None and base is not None and base >= MIN_TIMED_S:
            found.append((test, head, base))
    return found


def _total_ratio(tests: list[TestJudgement]) -> float | None:
    timed = _timed_on_both(tests)
    before = sum(base for _, _, base in timed)
    return sum(head for _, head, _ in timed) / before if timed else None
