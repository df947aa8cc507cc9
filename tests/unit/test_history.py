"""A test's history across runs: failure rate, where it fails now, and the known-flaky rule with its expiry; and
what a known-flaky failure does to a pull request's verdict (a warning on every surface, never red)."""

from __future__ import annotations

from datetime import datetime, timedelta

from service.compare.budgets import Budgets
from service.compare.comment import CheckSummary, render_comment
from service.compare.history import FLAKY_WINDOW, known_flaky, summaries, summarize
from service.compare.job_verdict import badges_of, job_verdict
from service.compare.judgement import BaseInfo, BaseStatus, judge
from service.compare.verdicts import Verdict
from service.github.checks import render_check_run
from service.github.markdown import JOINER
from service.store import Job, Run, TestResult
from service.store.history import TestRun

NOW = datetime(2026, 11, 26, 12, 0)
URL = "http://ci.example.test/jobs/r-correctness-cpu"


def _run(n: int, outcome: str, reruns: list[str] | None = None, trigger: str = "pull_request", pr: int | None = 7,
         days_ago: float = 1.0, nodeid: str = "t::wobbly") -> TestRun:
    return TestRun(nodeid, f"run{n}", f"run{n}-correctness-cpu", 1, trigger, pr if trigger == "pull_request" else None,
                   f"{n:040x}", NOW - timedelta(days=days_ago), NOW - timedelta(days=days_ago), outcome,
                   {"reruns": reruns or []}, "")


def test_two_flaky_runs_elsewhere_make_a_test_known_flaky_until_the_window_after_the_last() -> None:
    runs = [_run(1, "passed", ["failed"], trigger="push", days_ago=3), _run(2, "passed", ["failed"], pr=8, days_ago=1)]
    (known,) = known_flaky(runs, NOW, exclude_pr=7).values()
    assert (known.runs, known.last, known.until) == (2, NOW - timedelta(days=1), NOW - timedelta(days=1) + FLAKY_WINDOW)


def test_what_does_not_count_as_evidence() -> None:
    once = [_run(1, "passed", ["failed"], trigger="push")]
    own = [_run(1, "passed", ["failed"], pr=7), _run(2, "passed", ["failed"], pr=7)]  # the judged PR's own runs
    old = [_run(1, "passed", ["failed"], trigger="push", days_ago=20), _run(2, "passed", ["failed"], pr=8, days_ago=15)]
    plain_failures = [_run(1, "failed", trigger="push"), _run(2, "failed", pr=8)]  # failing is not flaky
    for runs in (once, own, old, plain_failures):
        assert known_flaky(runs, NOW, exclude_pr=7) == {}


def test_a_summary_says_the_rate_and_where_it_fails_now() -> None:
    runs = [_run(1, "failed", pr=8, days_ago=0.5), _run(2, "passed", trigger="push", days_ago=1),
            _run(3, "passed", pr=8, days_ago=2), _run(4, "failed", pr=9, days_ago=3),
            _run(5, "passed", ["failed"], pr=7, days_ago=4)]
    summary = summarize(runs, exclude_pr=7)
    assert (summary.runs, summary.failed, summary.flaky) == (5, 2, 1)
    assert summary.failure_rate == 0.4 and summary.default_branch_outcome == "passed"
    assert summary.failing_prs == (8, 9)  # the newest result of each other pull request


def _result(nodeid: str, outcome: str) -> TestResult:
    return TestResult(nodeid=nodeid, outcome=outcome, duration_s=0.1, metrics={}, message="boom")


def test_a_known_flaky_failure_is_a_warning_not_red_on_every_surface() -> None:
    evidence = [_run(1, "passed", ["failed"], trigger="push", days_ago=2), _run(2, "passed", ["failed"], pr=8)]
    flaky = known_flaky(evidence, NOW, exclude_pr=7)
    head = [_result("t::wobbly", "failed"), _result("t::ok", "passed")]
    base = [_result("t::wobbly", "passed"), _result("t::ok", "passed")]
    judgement = judge(head, base, BaseInfo(BaseStatus.READY, "b" * 40), Budgets(), flaky=flaky)
    (test,) = judgement.of(Verdict.KNOWN_FLAKY)
    assert "known flaky: flaky in 2 runs" in test.detail
    verdict = job_verdict("failure", "", "1 failed, 1 passed", judgement)
    assert (verdict.conclusion, verdict.title) == ("success", "Green — 1 known flaky (1 failed, 1 passed)")
    assert badges_of(test.verdict, bool(test.violations)) == ["KNOWN FLAKY"]
    # Without the evidence the same failure is new, and red.
    red = job_verdict("failure", "", "1 failed, 1 passed",
                      judge(head, base, BaseInfo(BaseStatus.READY, "b" * 40), Budgets()))
    assert (red.conclusion, red.title) == ("failure", "1 new failure — 1 failed, 1 passed")


def test_a_new_failure_says_where_else_it_fails_now_in_the_check_run_and_the_comment() -> None:
    runs = [_run(1, "failed", trigger="push", days_ago=0.5, nodeid="t::a"),  # the default branch, newest
            _run(2, "failed", pr=12, nodeid="t::a"), _run(3, "failed", pr=15, nodeid="t::a"),
            _run(4, "passed", pr=20, days_ago=0.2, nodeid="t::a"), _run(5, "failed", pr=20, days_ago=2, nodeid="t::a"),
            _run(6, "failed", pr=7, nodeid="t::a"),  # the judged pull request's own earlier run
            _run(7, "failed", pr=12, nodeid="t::new"),  # a test the base does not have
            _run(8, "failed", trigger="push", nodeid="t::old")]  # failing at the base: not red, no note
    history = summaries(runs, exclude_pr=7)
    head = [_result("t::a", "failed"), _result("t::new", "failed"), _result("t::old", "failed"),
            _result("t::quiet", "failed")]
    base = [_result("t::a", "passed"), _result("t::old", "failed"), _result("t::quiet", "passed")]
    judgement = judge(head, base, BaseInfo(BaseStatus.READY, "b" * 40), Budgets(), history=history)
    view = render_check_run(Run(id="r", repo_full_name="o/r", head_sha="f" * 40, repo_id=1, installation_id=2),
                            Job(id="r-correctness-cpu", run_id="r", suite="correctness", device="cpu", attempt=1,
                                conclusion="failure", failed=4, title="4 failed", state="completed"),
                            head, URL, judgement)
    verdict = job_verdict("failure", "", "4 failed", judgement)
    body = render_comment("f" * 40, "b" * 40, [CheckSummary("correctness (cpu)", verdict, URL, judgement,
                                                            lambda n: f"{URL}/{n}")])
    for text in (view.summary, body):
        shown = text.replace(JOINER, "")  # as GitHub shows it
        lines = {line.split("`")[1]: line for line in shown.splitlines() if line.startswith("- ") and "`t::" in line}
        assert lines["t::a"].endswith(" — also failing on the default branch and in #12, #15"), lines
        assert lines["t::new"].endswith(" — also failing in #12"), lines
        assert "also failing" not in lines["t::quiet"] + lines["t::old"], lines
        assert "#7" not in shown and "#20" not in shown  # its own pull request; one whose newest result passes
        assert "#12" not in text and "@" not in text  # inert: no cross-reference is made in pull request 12


def test_more_than_five_other_pull_requests_are_counted_not_named() -> None:
    runs = [_run(n, "failed", pr=100 + n) for n in range(8)]
    assert summarize(runs).also_failing() == "also failing in #100, #101, #102, #103, #104 and 3 more"
    assert summarize([_run(1, "passed", trigger="push")]).also_failing() == ""
