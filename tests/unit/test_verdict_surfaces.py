"""The check run's summary and the sticky comment say what its title and table say: the same counts, in the same
words, of the same tests."""

from __future__ import annotations

from service.compare.budgets import Budgets
from service.compare.judgement import BaseInfo, BaseStatus, judge
from service.github.checks import render_check_run
from service.store import Job, Run, TestResult

URL = "http://ci.example.test/jobs/abc-correctness-cpu"
READY = BaseInfo(BaseStatus.READY, "b" * 40, "base", "base run")


def _result(nodeid: str, outcome: str) -> TestResult:
    return TestResult(nodeid=nodeid, outcome=outcome, message="assert 1 == 2" if outcome == "failed" else "",
                      metrics=None, file="test_a.py", line=3)


def _job(**fields: object) -> Job:
    base = dict(id="abc-correctness-cpu", run_id="abc", suite="correctness", device="cpu", attempt=1,
                passed=0, failed=0, skipped=0, errors=0, xfailed=0, xpassed=0, detail="", title="",
                torch_version="2.13.0", runner="local", state="completed")
    return Job(**{**base, **fields})


def _run() -> Run:
    return Run(id="abc", repo_full_name="o/r", head_sha="f" * 40, repo_id=1, installation_id=2)


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
