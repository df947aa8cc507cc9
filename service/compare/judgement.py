"""A head job judged against its base job (pure): verdicts, budget violations, ledger deltas, changed code."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from service.compare.bisection import Bisection
from service.compare.budgets import Budgets, Violation, violations
from service.compare.history import HistorySummary, KnownFlaky
from service.compare.ledger import Ledger, ledger_of
from service.compare.ledger_deltas import Delta, deltas_of, ranked, uncompared_times
from service.compare.verdicts import RED, Verdict, classify
from service.store import TestResult


class BaseStatus(StrEnum):
    READY = "ready"  # the base job finished with per-test results
    PENDING = "pending"  # queued or running: judged as without a base for now, re-judged when it finishes
    BROKEN = "broken"  # it ended without per-test results (infrastructure error, crash, timeout, cancelled)
    NONE = "none"  # not a pull request, no base sha, or no base job of this suite and device


@dataclass(frozen=True)
class BaseInfo:
    status: BaseStatus
    sha: str = ""
    run_id: str = ""
    kind: str = ""  # "push run" | "base run"
    reason: str = ""  # why a BROKEN base could not be used (its check run's title)
    url: str = ""  # the base job's page


@dataclass(frozen=True)
class TestJudgement:
    nodeid: str
    verdict: Verdict
    head: Ledger
    base: Ledger | None
    violations: tuple[Violation, ...] = ()
    code_changed: bool = False
    message: str = ""
    known_flaky: KnownFlaky | None = None
    elsewhere: HistorySummary | None = None  # a red test's recent results in the repository's other runs
    culprit: Bisection | None = None  # a failing test's bisection, as its job left it

    @property
    def also_failing(self) -> str:
        """A new failure's "also failing on the default branch / in #12, #15" ("" when it fails nowhere else)."""
        return self.elsewhere.also_failing() if self.elsewhere is not None and self.verdict in RED else ""

    @property
    def detail(self) -> str:
        parts = [v.describe() for v in self.violations]
        if self.verdict == Verdict.FLAKY:
            parts.insert(0, f"earlier attempts in this job: {', '.join(self.head.reruns)}")
        if self.verdict == Verdict.KNOWN_FLAKY and self.known_flaky is not None:
            parts.insert(0, self.known_flaky.describe())
        return "; ".join(parts)


@dataclass(frozen=True)
class Judgement:
    base: BaseInfo
    tests: list[TestJudgement] = field(default_factory=list)
    deltas: list[Delta] = field(default_factory=list)  # ranked: graph breaks and recompiles first
    # (base's cache state, head's) -> tests whose compile times were not compared (cold against warm, say)
    uncompared_times: Counter[tuple[str, str]] = field(default_factory=Counter)

    def of(self, *verdicts: Verdict) -> list[TestJudgement]:
        return [t for t in self.tests if t.verdict in verdicts]

    @property
    def violations(self) -> list[Violation]:
        return [v for t in self.tests for v in t.violations]

    @property
    def code_changed(self) -> list[TestJudgement]:
        return [t for t in self.tests if t.code_changed]

    @property
    def red(self) -> bool:
        return bool(self.of(*RED) or self.violations)

    @property
    def counts(self) -> Counter[str]:
        return Counter(t.verdict.value for t in self.tests)

    @property
    def noteworthy(self) -> bool:
        """Worth a pull-request comment: anything but all green and unchanged."""
        shown = (Verdict.NEW_FAILURE, Verdict.FAILED, Verdict.FAILING_AT_BASE, Verdict.FLAKY, Verdict.KNOWN_FLAKY,
                 Verdict.FIXED)
        return bool(self.of(*shown) or self.violations or self.code_changed)


def judge(head: Sequence[TestResult], base: Sequence[TestResult] | None, info: BaseInfo, budgets: Budgets,
          code_changed: Callable[[str], bool] = lambda nodeid: False,
          flaky: Mapping[str, KnownFlaky] | None = None,
          history: Mapping[str, HistorySummary] | None = None,
          culprits: Mapping[str, Bisection] | None = None) -> Judgement:
    """Every head test's verdict; with no usable base (`base` None), each is judged as without comparison.
    `flaky`: the known-flaky tests (service/compare/history.py), whose failures are warnings, not red;
    `history`: failing tests' results elsewhere in the repository, which a new failure's line repeats;
    `culprits`: failing tests' bisections (service/compare/bisection.py), which their lines name."""
    by_id = {r.nodeid: r for r in base or ()}
    tests, deltas, uncompared = [], [], Counter[tuple[str, str]]()
    for result in head:
        head_ledger = ledger_of(result.metrics)
        other = by_id.get(result.nodeid)
        if getattr(result, "not_affected", False):  # reused from the base: nothing of the head's to compare
            source = getattr(result, "reused_from", "")
            said = f"{result.outcome}, as job {source} ran it" if source else "not run yet: its source is running"
            tests.append(TestJudgement(result.nodeid, Verdict.NOT_AFFECTED, head_ledger, None, message=said))
            continue
        verdict = classify(result.outcome, head_ledger.reruns, other.outcome if other else None)
        known = (flaky or {}).get(result.nodeid) if verdict in RED else None
        if known is not None:
            verdict = Verdict.KNOWN_FLAKY
        elsewhere = (history or {}).get(result.nodeid) if verdict in RED else None
        culprit = (culprits or {}).get(result.nodeid)
        if other is None:
            tests.append(TestJudgement(result.nodeid, verdict, head_ledger, None, message=result.message,
                                       known_flaky=known, elsewhere=elsewhere, culprit=culprit))
            continue
        base_ledger = ledger_of(other.metrics)
        found = tuple(violations(result.nodeid, base_ledger, head_ledger, budgets))
        changed = result.outcome not in ("skipped",) and code_changed(result.nodeid)
        tests.append(TestJudgement(result.nodeid, verdict, head_ledger, base_ledger, found, changed, result.message,
                                   known, elsewhere, culprit))
        deltas += deltas_of(result.nodeid, base_ledger, head_ledger, changed)
        states = uncompared_times(base_ledger, head_ledger)
        if states is not None:
            uncompared[states] += 1
    return Judgement(info, tests, ranked(deltas), uncompared)
