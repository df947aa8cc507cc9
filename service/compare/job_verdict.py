"""One verdict per job, made here and nowhere else: the conclusion and title its check run shows, and the words the
sticky comment, the runs list, the run grid and the job and test pages repeat (they render this, never raw outcomes).

Titles lead with the judgement, since GitHub's merge box cuts them: "1 new failure — 2 failed, 176 passed",
"Green — 1 failing at base, 1 flaky (1 failed, 177 passed)". Raw counts follow for the record.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from service.compare.judgement import BaseStatus, Judgement
from service.compare.verdicts import Verdict

# A test's badge on every surface (job page, test page, comment lists), by its verdict; BUDGET is added for a test
# that broke a `[budgets]` limit, whatever its outcome.
BADGES: Mapping[Verdict, str] = {Verdict.NEW_FAILURE: "NEW", Verdict.FAILED: "NEW",
                                 Verdict.FAILING_AT_BASE: "AT BASE", Verdict.FLAKY: "FLAKY",
                                 Verdict.KNOWN_FLAKY: "KNOWN FLAKY", Verdict.FIXED: "FIXED",
                                 Verdict.NOT_AFFECTED: "REUSED"}
BUDGET = "BUDGET"
TEST_OUTCOME_CONCLUSIONS = ("success", "failure")
# What an advisory torch version's job (a release candidate: service/torch_versions.py) says instead of red.
NOT_BLOCKING = ("failure", "timed_out")
ADVISORY_PREFIX = "Advisory torch, not blocking — "


@dataclass(frozen=True)
class JobVerdict:
    conclusion: str
    title: str
    judged: bool = False  # compared with a base that has results
    new: int = 0  # fail here, passed at the base or have no result there: red
    budget: int = 0  # tests over a [budgets] limit: red
    at_base: int = 0  # fail at the base too: shown, not red
    flaky: int = 0  # failed, then passed when re-run in the job: shown, not red
    known_flaky: int = 0  # failed, but known flaky across the repository's recent runs: shown, not red
    fixed: int = 0
    not_affected: int = 0  # reused, not run: nothing they depend on changed since the base; its results, not red
    advisory: bool = False  # red on the default torch, neutral here: its torch version is advisory

    @property
    def figures(self) -> tuple[int, int, int, int]:
        """The sticky comment's columns: new, failing at base, flaky (in this job or known), budget violations."""
        return self.new, self.at_base, self.flaky + self.known_flaky, self.budget


BASE_PENDING = " — base still running"  # a title that ends so is updated when the base run finishes


def job_verdict(conclusion: str, title: str, raw_title: str, judgement: Judgement | None,
                advisory: bool = False) -> JobVerdict:
    """`conclusion`/`title`: the job's own (as it ended); `raw_title`: its test counts in pytest's words, which its
    title equals when its tests ran to the end (else it is a timeout, a crash, an install or config failure: those
    are not judged against a base and keep their words). `advisory`: the job ran on an advisory torch version, whose
    failures are told (neutral, same counts, same lists) but never turn a pull request red."""
    verdict = _judged(conclusion, title, raw_title, judgement)
    if advisory and verdict.conclusion in NOT_BLOCKING:
        return replace(verdict, conclusion="neutral", title=ADVISORY_PREFIX + verdict.title, advisory=True)
    return verdict


def _judged(conclusion: str, title: str, raw_title: str, judgement: Judgement | None) -> JobVerdict:
    tests_ran = title in ("", raw_title) and conclusion in TEST_OUTCOME_CONCLUSIONS
    shown = title or raw_title
    if judgement is None or not tests_ran:
        return JobVerdict(conclusion, shown)
    if judgement.base.status == BaseStatus.PENDING:
        return JobVerdict(conclusion, f"{shown}{BASE_PENDING}")
    if judgement.base.status != BaseStatus.READY:
        return JobVerdict(conclusion, shown)
    new = len(judgement.of(Verdict.NEW_FAILURE, Verdict.FAILED))
    budget = len({v.nodeid for v in judgement.violations})
    at_base, flaky = len(judgement.of(Verdict.FAILING_AT_BASE)), len(judgement.of(Verdict.FLAKY))
    known, fixed = len(judgement.of(Verdict.KNOWN_FLAKY)), len(judgement.of(Verdict.FIXED))
    left = len(judgement.of(Verdict.NOT_AFFECTED))
    counts = dict(new=new, budget=budget, at_base=at_base, flaky=flaky, known_flaky=known, fixed=fixed,
                  not_affected=left)
    notes = [said for said in (counted(at_base, "failing at base", "failing at base"), counted(flaky, "flaky", "flaky"),
                               counted(known, "known flaky", "known flaky"), counted(fixed, "fixed", "fixed"),
                               counted(left, "reused from the base", "reused from the base")) if said]
    if new or budget:
        red = [said for said in (counted(new, "new failure", "new failures"),
                                 counted(budget, "budget violation", "budget violations")) if said]
        return JobVerdict("failure", f"{', '.join(red + notes)} — {raw_title}", True, **counts)
    if notes:
        return JobVerdict("success", f"Green — {', '.join(notes)} ({raw_title})", True, **counts)
    return JobVerdict("success", raw_title, True, **counts)


def reused_verdict(verdict: JobVerdict, reused: Sequence[tuple[str, str]]) -> JobVerdict:
    """A job judged against no base (a push) with results reused from an earlier job, as (outcome, source job):
    they are its own facts (every input the same), so a reused failure is red too; said as reused."""
    if not reused or verdict.conclusion not in TEST_OUTCOME_CONCLUSIONS or verdict.judged:
        return verdict
    pending = sum(outcome == "not_run" for outcome, _source in reused)
    if pending:
        return replace(verdict, title=f"{verdict.title} — {pending} reused results pending (their source is running)")
    failed = sum(outcome in ("failed", "error") for outcome, _source in reused)
    tally = Counter(outcome for outcome, _source in reused)
    said = ", ".join(f"{n} {outcome}" for outcome, n in sorted(tally.items(), key=lambda item: -item[1]))
    sources = sorted({source for _outcome, source in reused})
    title = (f"{counted(len(reused), 'reused', 'reused')} ({said}) from job {', '.join(sources)}; ran here: "
             f"{verdict.title}")
    return replace(verdict, conclusion="failure" if failed else verdict.conclusion, title=title,
                   not_affected=len(reused))


def badges_of(verdict: str, over_budget: bool) -> list[str]:
    """The badges of a test from what the store keeps of its judgement (test_results.verdict, .over_budget)."""
    try:
        words = [BADGES[Verdict(verdict)]] if verdict and Verdict(verdict) in BADGES else []
    except ValueError:
        words = []
    return words + [BUDGET] if over_budget else words


def counted(n: int, one: str, many: str) -> str:
    """"1 new failure", "2 new failures", "" for none: every count the check run and the comment say of tests."""
    return f"{n} {one if n == 1 else many}" if n else ""
