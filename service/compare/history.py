"""What a test's recent history says (pure): its failure rate, where else it fails, and whether it is *known flaky*.

Known flaky: the test was flaky (failed, then passed when re-run in the same job) in at least KNOWN_AFTER runs of the
repository within the last FLAKY_WINDOW, counting the default branch and other pull requests, never the pull request
being judged (its own flakiness may be what it introduced). A failure of a known-flaky test is a warning, not red,
until FLAKY_WINDOW after its last flaky run: the state expires by itself once the test stops being flaky.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from service.compare.ledger import ledger_of
from service.compare.verdicts import FAILING, PASSING
from service.store.history import TestRun

FLAKY_WINDOW = timedelta(days=14)
KNOWN_AFTER = 2
MAX_PRS_SAID = 5  # other pull requests named in "also failing in #12, #15"


@dataclass(frozen=True)
class KnownFlaky:
    runs: int  # flaky runs within the window
    last: datetime  # the last of them
    until: datetime  # when the state expires unless the test is flaky again

    def describe(self) -> str:
        return (f"known flaky: flaky in {self.runs} runs of the last {FLAKY_WINDOW.days} days (last "
                f"{self.last:%Y-%m-%d}), so a failure is a warning until {self.until:%Y-%m-%d}")


@dataclass(frozen=True)
class HistorySummary:
    runs: int
    failed: int
    flaky: int
    default_branch_outcome: str  # the newest default-branch result ("" when none)
    failing_prs: tuple[int, ...]  # other pull requests whose newest result of it fails

    @property
    def failure_rate(self) -> float:
        return self.failed / self.runs if self.runs else 0.0

    def also_failing(self, shown: int = MAX_PRS_SAID) -> str:
        """"also failing on the default branch and in #12, #15", or "" when it fails nowhere else now (plain text:
        the surfaces that show it make it inert, so no pull request is pinged or cross-referenced)."""
        where = ["on the default branch"] if self.default_branch_outcome in FAILING else []
        if self.failing_prs:
            more = len(self.failing_prs) - shown
            prs = ", ".join(f"#{pr}" for pr in self.failing_prs[:shown]) + (f" and {more} more" if more > 0 else "")
            where.append(f"in {prs}")
        return f"also failing {' and '.join(where)}" if where else ""


def was_flaky(run: TestRun) -> bool:
    return run.outcome in PASSING and any(r in FAILING for r in ledger_of(run.metrics).reruns)


def known_flaky(runs: Iterable[TestRun], now: datetime, exclude_pr: int | None = None) -> dict[str, KnownFlaky]:
    """The known-flaky tests among `runs` (any order), as of `now`."""
    evidence: dict[str, set[str]] = {}
    last: dict[str, datetime] = {}
    for run in runs:
        if exclude_pr is not None and run.pr_number == exclude_pr and not run.default_branch:
            continue
        if now - run.created_at > FLAKY_WINDOW or not was_flaky(run):
            continue
        evidence.setdefault(run.nodeid, set()).add(run.run_id)
        last[run.nodeid] = max(last.get(run.nodeid, run.created_at), run.created_at)
    return {nodeid: KnownFlaky(len(ids), last[nodeid], last[nodeid] + FLAKY_WINDOW)
            for nodeid, ids in evidence.items() if len(ids) >= KNOWN_AFTER}


def summarize(runs: Sequence[TestRun], exclude_pr: int | None = None) -> HistorySummary:
    """Newest-first results of one test: its failure rate and where else it fails now."""
    newest_default = next((r.outcome for r in runs if r.default_branch), "")
    newest_per_pr: dict[int, str] = {}
    for run in runs:
        if run.trigger == "pull_request" and run.pr_number is not None and run.pr_number != exclude_pr:
            newest_per_pr.setdefault(run.pr_number, run.outcome)
    return HistorySummary(
        runs=len(runs), failed=sum(r.outcome in FAILING for r in runs), flaky=sum(was_flaky(r) for r in runs),
        default_branch_outcome=newest_default,
        failing_prs=tuple(sorted(pr for pr, outcome in newest_per_pr.items() if outcome in FAILING)))


def summaries(runs: Iterable[TestRun], exclude_pr: int | None = None) -> dict[str, HistorySummary]:
    """Per test, `summarize` of its rows among `runs` (newest first, several tests: one query's rows)."""
    by_test: dict[str, list[TestRun]] = {}
    for run in runs:
        by_test.setdefault(run.nodeid, []).append(run)
    return {nodeid: summarize(rows, exclude_pr) for nodeid, rows in by_test.items()}
