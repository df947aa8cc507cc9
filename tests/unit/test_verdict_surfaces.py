"""The check run's summary and the sticky comment say what its title and table say: the same counts, in the same
words, of the same tests."""

from __future__ import annotations

from service.compare.budgets import Budgets
from service.compare.comment import CheckSummary, render_comment
from service.compare.job_verdict import job_verdict
from service.compare.judgement import BaseInfo, BaseStatus, Judgement, judge
from service.github.checks import render_check_run
from service.store import TestResult
from tests.rows import job_row as _job
from tests.rows import run_row as _run

URL = "http://ci.example.test/jobs/abc-correctness-cpu"
READY = BaseInfo(BaseStatus.READY, "b" * 40, "base", "base run")


def _result(nodeid: str, outcome: str) -> TestResult:
    return TestResult(nodeid=nodeid, outcome=outcome, message="assert 1 == 2" if outcome == "failed" else "",
                      metrics=None, file="test_a.py", line=3)


def test_the_summarys_counts_line_counts_as_the_title_does() -> None:
    head = [_result("t::a", "failed"), _result("t::b", "failed"), _result("t::new", "failed"),
            _result("t::ok", "passed")]
    base = [_result("t::a", "passed"), _result("t::b", "passed"), _result("t::ok", "passed")]  # no t::new there
    judgement = judge(head, base, READY, Budgets())
    job = _job(conclusion="failure", failed=3, passed=1, title="3 failed, 1 passed")
    view = render_check_run(_run(), job, head, URL, judgement)
    assert view.title == "3 new failures — 3 failed, 1 passed"
    counts = view.summary.split("Compared with the base", 1)[1].split("\n\n")[1]
    assert counts == "3 new failures, 1 unchanged"  # not "2 new failure, 1 failed"
    assert "**New failures**" in view.summary and "Failing without a base result" not in view.summary
    assert f"- [`t::new`]({URL}/tests/t__new) (no base result): `assert 1 == 2`" in view.summary


def test_one_new_failure_is_singular() -> None:
    head = [_result("t::a", "failed"), _result("t::b", "passed"), _result("t::c", "passed")]
    judgement = judge(head, [_result("t::a", "passed"), _result("t::b", "passed")], READY, Budgets())
    view = render_check_run(_run(), _job(conclusion="failure", failed=1, passed=2, title="1 failed, 2 passed"),
                            head, URL, judgement)
    assert "\n\n1 new failure, 1 unchanged, 1 passed without a base result\n\n" in view.summary


def _check(name: str, conclusion: str, title: str, raw: str, judgement: Judgement) -> CheckSummary:
    return CheckSummary(name, job_verdict(conclusion, title, raw, judgement), URL, judgement,
                        lambda n: f"{URL}/tests/{n}")


def _row(body: str, name: str) -> list[str]:
    (row,) = [line for line in body.splitlines() if line.startswith(f"| [{name}]")]
    return [cell.strip() for cell in row.strip("|").split("|")][2:]


def test_the_comments_lists_count_only_what_its_table_counts() -> None:
    head = [_result("t::new", "failed"), _result("t::ok", "passed")]
    base = [_result("t::new", "passed"), _result("t::ok", "passed")]
    red = judge(head, base, READY, Budgets())
    # Its tests ended (one new failure among them), but the job timed out: not judged, its row says "–".
    slow = judge([_result("t::late", "failed")], [_result("t::late", "passed")], READY, Budgets())
    body = render_comment("f" * 40, "b" * 40, [
        _check("correctness (cpu)", "failure", "", "1 failed, 1 passed", red),
        _check("models (cpu)", "timed_out", "Timed out after 60 min", "1 failed", slow)])
    assert _row(body, "models (cpu)") == ["–"] * 5
    assert _row(body, "correctness (cpu)")[0] == "1"
    assert "**New failures** (1)" in body and "t::new" in body and "t::late" not in body


def test_a_check_that_did_not_run_waits_for_no_base() -> None:
    pending = BaseInfo(BaseStatus.PENDING, "b" * 40)
    running = judge([_result("t::a", "failed")], None, pending, Budgets())
    body = render_comment("f" * 40, "b" * 40, [
        _check("correctness (cpu)", "failure", "", "1 failed", running),
        _check("correctness (cuda)", "neutral", "Not run: no cuda runner", "", judge([], None, pending, Budgets())),
        _check("models (cpu)", "neutral", "No tests ran", "", judge([], None, BaseInfo(BaseStatus.NONE), Budgets()))])
    assert "Base still running for correctness (cpu): this comment is updated when it finishes." in body
    assert "No usable base result" not in body
