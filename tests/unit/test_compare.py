"""Judging a head job against its base: verdicts, budgets, ledgers a job wrote, the check run and the comment."""

from __future__ import annotations

import math

import pytest

from service.compare.budgets import Budgets, parse_budgets, violations
from service.compare.comment import MARKER, CheckSummary, render_comment, worth_a_comment
from service.compare.job_verdict import job_verdict
from service.compare.judgement import BaseInfo, BaseStatus, judge
from service.compare.ledger import Ledger, ledger_of, new_reasons
from service.compare.verdicts import Verdict, classify
from service.github.checks import render_check_run
from service.repo_config import ConfigProblem, RepoConfig, parse_repo_config
from service.store import TestResult
from tests.rows import job_row as _job
from tests.rows import run_row as _run

URL = "http://ci.example.test/jobs/abc-correctness-cpu"
READY = BaseInfo(BaseStatus.READY, "b" * 40, "base", "base run")
BREAK = "Unsupported Tensor.item() call with capture_scalar_outputs=False (model.py:12)"


@pytest.mark.parametrize(("head", "reruns", "base", "verdict"), [
    ("failed", (), "passed", Verdict.NEW_FAILURE),
    ("error", (), "xpassed", Verdict.NEW_FAILURE),
    ("failed", (), "failed", Verdict.FAILING_AT_BASE),
    ("failed", (), "error", Verdict.FAILING_AT_BASE),
    ("failed", (), None, Verdict.FAILED),
    ("failed", (), "skipped", Verdict.FAILED),  # skipped at the base: nothing to compare with
    ("failed", ("failed", "failed"), "passed", Verdict.NEW_FAILURE),  # failed on every attempt: not flaky
    ("passed", ("failed",), "passed", Verdict.FLAKY),
    ("passed", ("error", "failed"), None, Verdict.FLAKY),
    ("passed", (), "failed", Verdict.FIXED),
    ("passed", (), "passed", Verdict.UNCHANGED),
    ("passed", (), None, Verdict.PASSED),
    ("skipped", (), "passed", Verdict.SKIPPED),
    ("xfailed", (), "xfailed", Verdict.UNCHANGED),
])
def test_classify(head: str, reruns: tuple[str, ...], base: str | None, verdict: Verdict) -> None:
    assert classify(head, reruns, base) == verdict


def test_a_ledger_keeps_only_well_formed_fields_of_what_the_job_wrote() -> None:
    junk = {"graph_breaks": "3", "recompiles": True, "compile_time_s": math.inf, "kernels_generated": -1,
            "code_bytes": 10**12, "graph_break_reasons": ["ok", 5, "x" * 10_000] + ["r"] * 500,
            "recompile_reasons": "not a list", "reruns": ["failed", "<script>", None]}
    ledger = ledger_of(junk)
    assert ledger == Ledger(graph_break_reasons=ledger.graph_break_reasons, reruns=("failed",))
    assert len(ledger.graph_break_reasons) == 49 and len(ledger.graph_break_reasons[1]) == 500
    assert ledger_of(None) == ledger_of([1, 2]) == Ledger()  # type: ignore[arg-type]


def test_new_reasons_are_a_multiset_difference() -> None:
    assert new_reasons(("a", "b"), ("a", "a", "c")) == ["a", "c"]


@pytest.mark.parametrize(("table", "problems"), [
    ({"new_graph_breaks": 0, "new_recompiles": 2, "compile_time_ratio": 1.25}, []),
    ({"new_graph_breaks": -1}, [("new_graph_breaks", "must be an integer from 0 to 1000, got -1")]),
    ({"new_recompiles": True}, [("new_recompiles", "must be an integer from 0 to 1000, got True")]),
    ({"compile_time_ratio": 0.5}, [("compile_time_ratio", "must be a number from 1 to 100, got 0.5")]),
    ({"compile_time_min_s": "1s"}, [("compile_time_min_s", "must be a number from 0 to 3600, got '1s'")]),
])
def test_parse_budgets(table: dict[str, object], problems: list[tuple[str, str]]) -> None:
    assert parse_budgets(table)[1] == problems


def test_budget_violations_name_the_figure_and_dynamos_reason() -> None:
    budgets = Budgets(new_graph_breaks=0, new_recompiles=1, compile_time_ratio=1.25, compile_time_min_s=1.0)
    cold = {"fx_graph_cache_hits": 0, "fx_graph_cache_misses": 1}  # both compiled: compile times compare
    base = Ledger(graph_breaks=0, recompiles=0, compile_time_s=2.0, **cold)
    head = Ledger(graph_breaks=1, recompiles=1, compile_time_s=3.0, graph_break_reasons=(BREAK,), **cold)
    found = violations("t::x", base, head, budgets)
    assert [v.describe() for v in found] == [
        f"graph_breaks 0 → 1 (budget: at most 0 new): {BREAK}",
        "compile_time_s 2 → 3 (budget: at most ×1.25 the base): ×1.50",
    ]
    # Below the floor a ratio is noise; without a budget nothing is judged.
    assert violations("t::x", Ledger(compile_time_s=0.2), Ledger(compile_time_s=0.6), budgets) == []
    assert violations("t::x", base, head, Budgets()) == []


def _result(nodeid: str, outcome: str, **metrics: object) -> TestResult:
    return TestResult(nodeid=nodeid, outcome=outcome, message="assert 1 == 2" if outcome == "failed" else "",
                      metrics=metrics or None, file="test_a.py", line=3)


def test_a_failure_the_base_has_too_is_a_warning_and_the_check_stays_green() -> None:
    head = [_result("t::old", "failed"), _result("t::ok", "passed")]
    base = [_result("t::old", "failed"), _result("t::ok", "passed")]
    judgement = judge(head, base, READY, Budgets())
    view = render_check_run(_run(), _job(conclusion="failure", failed=1, passed=1, title="1 failed, 1 passed"),
                            head, URL, judgement)
    assert (view.conclusion, view.title) == ("success", "Green — 1 failing at base (1 failed, 1 passed)")
    assert [a["annotation_level"] for a in view.annotations] == ["warning"]
    assert "**Failing at the base too (not counted against this pull request)**" in view.summary


def test_a_budget_violation_turns_a_green_job_red_and_names_the_reason() -> None:
    head = [_result("t::model", "passed", graph_breaks=1, graph_break_reasons=[BREAK])]
    base = [_result("t::model", "passed", graph_breaks=0, graph_break_reasons=[])]
    judgement = judge(head, base, READY, Budgets(new_graph_breaks=0))
    view = render_check_run(_run(), _job(conclusion="success", passed=1, title="1 passed"), head, URL, judgement)
    assert (view.conclusion, view.title) == ("failure", "1 budget violation — 1 passed")
    assert f"graph_breaks 0 → 1 (budget: at most 0 new): {BREAK}" in view.summary
    (note,) = view.annotations
    assert note["annotation_level"] == "failure" and BREAK in note["message"] and note["path"] == "test_a.py"
    assert "| `t::model` | graph breaks | 0 | 1 |" in view.summary  # the biggest ledger changes


def test_a_flaky_test_is_a_notice_and_changed_code_is_counted_with_links() -> None:
    head = [_result("t::flaky", "passed", reruns=["failed"]), _result("t::pass", "passed")]
    base = [_result("t::flaky", "passed"), _result("t::pass", "passed")]
    judgement = judge(head, base, READY, Budgets(), code_changed=lambda nodeid: nodeid == "t::pass")
    view = render_check_run(_run(), _job(conclusion="success", passed=2, title="2 passed"), head, URL, judgement)
    assert (view.conclusion, view.title) == ("success", "Green — 1 flaky (2 passed)")
    assert [a["annotation_level"] for a in view.annotations] == ["notice"]
    assert "earlier attempts in this job: failed" in view.summary
    assert f"**Generated code changed in 1 test**\n\n- [`t::pass`]({URL}/tests/t__pass)" in view.summary


@pytest.mark.parametrize("status", [BaseStatus.PENDING, BaseStatus.BROKEN, BaseStatus.NONE])
def test_without_a_usable_base_a_job_is_judged_as_before(status: BaseStatus) -> None:
    head = [_result("t::old", "failed")]
    judgement = judge(head, None, BaseInfo(status, "b" * 40, reason="Timed out"), Budgets(new_graph_breaks=0))
    view = render_check_run(_run(), _job(conclusion="failure", failed=1, title="1 failed"), head, URL, judgement)
    waiting = " — base still running" if status == BaseStatus.PENDING else ""
    assert (view.conclusion, view.title) == ("failure", f"1 failed{waiting}")
    assert {BaseStatus.PENDING: "is still running", BaseStatus.BROKEN: "ended without test results (Timed out)",
            BaseStatus.NONE: "No base result"}[status] in view.summary


def test_an_outcome_that_is_not_about_tests_is_never_turned_green() -> None:
    head = [_result("t::a", "failed")]
    judgement = judge(head, [_result("t::a", "failed")], READY, Budgets())
    job = _job(conclusion="failure", failed=1, title="Out of memory")
    assert render_check_run(_run(), job, head, URL, judgement).conclusion == "failure"


def test_the_comment_lists_every_check_and_is_skipped_when_all_is_green_and_unchanged() -> None:
    head = [_result("t::new", "failed"), _result("t::ok", "passed")]
    red = judge(head, [_result("t::new", "passed"), _result("t::ok", "passed")], READY, Budgets())
    quiet = judge([_result("t::ok", "passed")], [_result("t::ok", "passed")], READY, Budgets())
    checks = [CheckSummary("correctness (cpu)", job_verdict("failure", "", "1 failed, 1 passed", red), URL, red,
                           lambda n: f"{URL}/tests/{n}"),
              CheckSummary("passes (cpu)", job_verdict("success", "", "1 passed", quiet), URL, quiet,
                           lambda n: f"{URL}/tests/{n}")]
    body = render_comment("f" * 40, "b" * 40, checks)
    assert body.startswith(MARKER)
    # The table's figures and the lists below it count the same tests (a new failure is one failing only here).
    assert f"| [correctness (cpu)]({URL}) | ❌ 1 new failure — 1 failed, 1 passed | 1 | 0 | 0 | 0 | 0 |" in body
    assert f"**New failures** (1)\n\n- correctness (cpu): [`t::new`]({URL}/tests/t::new)" in body
    assert worth_a_comment(checks) and not worth_a_comment(checks[1:])


def test_config_budgets_comment_and_reruns() -> None:
    text = ("[suites]\nflaky_reruns = 3\n[budgets]\nnew_graph_breaks = 0\ncompile_time_ratio = 1.25\n"
            "[comment]\nalways = true\n")
    config = parse_repo_config(text, ("correctness",))
    assert isinstance(config, RepoConfig)
    assert (config.flaky_reruns, config.comment_always) == (3, True)
    assert config.budgets == Budgets(new_graph_breaks=0, compile_time_ratio=1.25)
    assert parse_repo_config("", ("correctness",)).flaky_reruns == 2  # type: ignore[union-attr]
    bad = "[suites]\nflaky_reruns = 9\n[budgets]\nnew_graph_breaks = -1\nbreaks = 0\n[comment]\nalways = 1\n"
    assert parse_repo_config(bad, ("correctness",)) == [
        ConfigProblem(2, "[suites] flaky_reruns: must be an integer from 0 to 5, got 9"),
        ConfigProblem(4, "[budgets] new_graph_breaks: must be an integer from 0 to 1000, got -1"),
        ConfigProblem(5, "[budgets] breaks: unknown key (expected one of: new_graph_breaks, new_recompiles, "
                         "compile_time_ratio, compile_time_min_s)"),
        ConfigProblem(7, "[comment] always: must be true or false, got 1"),
    ]


def test_biggest_changes_put_graph_breaks_first_and_ignore_compile_time_noise() -> None:
    head = [_result("t::a", "passed", compile_time_s=1.03, kernels_generated=4),
            _result("t::b", "passed", graph_breaks=2, code_bytes=2000)]
    base = [_result("t::a", "passed", compile_time_s=1.0, kernels_generated=2),
            _result("t::b", "passed", graph_breaks=1, code_bytes=1000)]
    deltas = judge(head, base, READY, Budgets(), code_changed=lambda nodeid: True).deltas
    assert [(d.nodeid, d.figure) for d in deltas] == [("t::b", "graph_breaks"), ("t::a", "kernels_generated"),
                                                      ("t::b", "code_bytes")]


LONG_FAILURE = ("AssertionError: assert tensor([" + ", ".join(f"{0.1 + i / 997:.6f}" for i in range(60))
                + "]) == tensor([0.0])\n\nThe values are not close.")


def test_failure_messages_are_cut_between_words_with_an_ellipsis() -> None:
    head = [TestResult(nodeid="t::new", outcome="failed", message=LONG_FAILURE, file="test_a.py", line=3)]
    judgement = judge(head, [_result("t::new", "passed")], READY, Budgets())
    view = render_check_run(_run(), _job(conclusion="failure", failed=1, title="1 failed"), head, URL, judgement)
    first = LONG_FAILURE.splitlines()[0]
    # the check run's list of failing tests (200 characters) and the judgement's list of new failures (400)
    for start, limit in (("- `t::new`: `", 200), ("- [`t::new`]", 400)):
        line = next(line for line in view.summary.splitlines() if line.startswith(start))
        assert line.endswith("…`"), line
        kept = line[line.index("`AssertionError") + 1:-2]
        assert len(kept) < limit and first.startswith(kept) and first[len(kept)] == " ", (kept, limit)


def test_a_base_run_never_writes_the_trusted_cache() -> None:
    from runners.compile_cache import UNTRUSTED, trust_class

    assert trust_class("base") == UNTRUSTED  # the base sha runs the pull request's config
