"""What the App posts is inert whatever a job wrote: the real check-run views and the sticky comment, built from
hostile test ids, messages, ledgers and details, rendered by GitHub's renderer and held to GitHub's limits."""

from __future__ import annotations

import pytest

from service.compare.budgets import Budgets
from service.compare.comment import MARKER, CheckSummary, render_comment
from service.compare.job_verdict import job_verdict
from service.compare.judgement import BaseInfo, BaseStatus, Judgement, judge
from service.devkit.github_emulator.checks import rule_errors
from service.github.checks import MAX_TEXT, CheckRunView, render_check_run
from service.github.checks import test_url as url_of_test
from service.github.markdown import clean, shorten
from service.jobs.run_planning import WAITING_DETAIL
from service.store import APPROVAL_SUITE, Job, Run, TestResult
from tests.rendered import Page, assert_inert
from tests.unit.test_github_markdown import HOSTILE

URL = "http://ci.example.test/jobs/abc-correctness-cpu"
READY = BaseInfo(BaseStatus.READY, "b" * 40, "base", "base run", url="http://ci.example.test/jobs/base-cpu")
# The Outcome details the worker writes today: the job's words inside our fence of three backticks.
PIP_DETAIL = "Nothing was tested: installing the repository itself failed.\n\n```\n{lines}\n```"
CONFIG_DETAIL = "Nothing ran: .compile-ci.toml has problems.\n\n```\n{lines}\n```"


def _run() -> Run:
    return Run(id="abc", repo_full_name="o/r", head_sha="f" * 40, repo_id=1, installation_id=2)


def _job(**fields: object) -> Job:
    base = dict(id="abc-correctness-cpu", run_id="abc", suite="correctness", device="cpu", attempt=1, rerun=0,
                passed=0, failed=0, skipped=0, errors=0, xfailed=0, xpassed=0, detail="", title="",
                torch_version="2.13.0", runner="local", state="completed", conclusion="failure")
    return Job(**{**base, **fields})


def _result(nodeid: str, outcome: str, message: str = "", details: str = "", **metrics: object) -> TestResult:
    return TestResult(nodeid=nodeid, outcome=outcome, message=message, details=details, metrics=metrics or None,
                      file="t.py", line=3, repo_path="")


def _hostile(size: int = 1) -> tuple[list[TestResult], Judgement]:
    """Every hostile string as a failing test's id and message, a flaky test, and a budget violation's reason."""
    head, base = [], []
    for i, text in enumerate(HOSTILE):
        nodeid = f"t.py::test_{i}[{text * size}]"
        head.append(_result(nodeid, "failed", f"{text}\nsecond line" * size, f"Traceback\n{text}\n" * size))
        base.append(_result(nodeid, "passed" if i % 2 else "failed"))
        broken = f"t.py::test_breaks_{i}[{text}]"
        head.append(_result(broken, "passed", graph_breaks=1, graph_break_reasons=[text * size], reruns=["failed"]))
        base.append(_result(broken, "passed", graph_breaks=0))
    return head, judge(head, base, READY, Budgets(new_graph_breaks=0), code_changed=lambda nodeid: True)


def _within_githubs_limits(view: CheckRunView) -> None:
    assert rule_errors({"output": view.output(view.annotations)}, creating=True) == []  # the emulator's rules
    assert len(view.summary.encode()) <= MAX_TEXT and len(view.text.encode()) <= MAX_TEXT
    assert len(view.title.encode()) <= 255 and clean(view.title) == view.title and "\n" not in view.title


def _shown_as_code(shown: Page, nodeids: list[str]) -> None:
    for nodeid in nodeids:
        assert " ".join(clean(nodeid).split("\n")) in shown.codes, nodeid


@pytest.mark.parametrize("detail", [
    PIP_DETAIL.format(lines="\n".join(HOSTILE)),
    CONFIG_DETAIL.format(lines="\n".join(HOSTILE)),
    "The test run did not complete: " + " ".join(HOSTILE),  # a junit problem quoting the job's file
])
def test_a_failed_jobs_check_run_is_inert(detail: str) -> None:
    head, judgement = _hostile()
    job = _job(failed=len(HOSTILE), passed=len(HOSTILE), detail=detail, title="1 failed\x1b\x00\n@octocat\u202e",
               torch_version="2.13.0 | @octocat <img src=x>")
    view = render_check_run(_run(), job, head, URL, judgement)
    summary = assert_inert(view.summary, our_urls=(URL, READY.url))
    _shown_as_code(summary, [r.nodeid for r in head if r.outcome == "failed"][:20])
    assert "Failing tests" in summary.visible and "Budget violations" in summary.visible
    _shown_as_code(assert_inert(view.text, our_urls=(URL,)), [r.nodeid for r in head if r.outcome == "failed"])
    assert view.title == "1 failed @octocat"  # plain text on GitHub: one line, no control characters
    _within_githubs_limits(view)


def test_annotations_are_plain_text_kept_as_written() -> None:
    """GitHub shows annotations as plain text: a backslash added to escape Markdown would be shown to the user."""
    head, judgement = _hostile()
    view = render_check_run(_run(), _job(failed=len(HOSTILE)), head, URL, judgement)
    by_test = {note["message"].split("]: ")[0] + "]": note for note in view.annotations}
    assert by_test["t.py::test_16[a | b || c]"]["message"] == "t.py::test_16[a | b || c]: a | b || c"
    assert by_test["t.py::test_8[<script>alert(1)</script>]"]["raw_details"] == "Traceback\n<script>alert(1)</script>"
    assert all(clean(note["message"]) == note["message"] for note in view.annotations)


def test_huge_hostile_output_is_cut_within_githubs_limits_with_nothing_left_open() -> None:
    head, judgement = _hostile(size=3000)  # messages and details of about 100 KB each
    detail = PIP_DETAIL.format(lines="`" * 7 + "☃@octocat" * 20_000)
    view = render_check_run(_run(), _job(failed=len(HOSTILE), detail=detail, title="☃" * 500), head, URL, judgement)
    _within_githubs_limits(view)
    for markdown, tail in ((view.summary, URL), (view.text, f"{URL}/log")):
        shown = assert_inert(markdown, our_urls=(URL, READY.url))
        assert shown.visible.endswith(f"the full text is at {tail}") and shown.hrefs[-1] == tail  # outside code
    for note in view.annotations:
        assert len(note["title"]) <= 255
        assert len(note["message"].encode()) <= 64_000 and len(note.get("raw_details", "").encode()) <= 64_000


@pytest.mark.parametrize("current", HOSTILE + ["`" * 5 + "@octocat" * 10_000])
def test_the_running_view_names_the_current_test_as_code(current: str) -> None:
    view = render_check_run(_run(), _job(state="running", progress_done=1, progress_total=9,
                                         progress_current=current), [], URL)
    shown = assert_inert(view.summary, our_urls=(URL,))
    assert shorten(" ".join(clean(current).split("\n")), 300) in shown.codes


def test_the_approval_check_run_keeps_its_command_as_code_and_pings_nobody() -> None:
    detail = WAITING_DETAIL.format(author="octocat", sha="f" * 12)
    job = _job(suite=APPROVAL_SUITE, device="none", conclusion="action_required", title="Waiting for approval",
               detail=detail)
    shown = assert_inert(render_check_run(_run(), job, [], URL).summary)
    assert shown.codes == ["/ok-to-test"] and shown.visible.startswith("Nothing has run: @octocat is not a member")


@pytest.mark.parametrize("reason", HOSTILE)
def test_a_broken_bases_reason_is_plain(reason: str) -> None:
    head = [_result("t.py::test_a", "failed", "boom")]
    judgement = judge(head, None, BaseInfo(BaseStatus.BROKEN, "b" * 40, reason=reason), Budgets())
    view = render_check_run(_run(), _job(failed=1), head, URL, judgement)
    assert " ".join(clean(reason).split()) in assert_inert(view.summary, our_urls=(URL,)).visible


def test_the_sticky_comment_is_inert() -> None:
    head, judgement = _hostile()
    verdict = job_verdict("failure", "", "many failed", judgement)
    checks = [CheckSummary(name, verdict, URL, judgement, lambda nodeid: url_of_test(URL, nodeid))
              for name in ("correctness (cpu)", "correctness (cuda)")]
    body = render_comment("f" * 40, "b" * 40, checks)
    shown = assert_inert(body, our_urls=(URL,), our_comments=(MARKER.removeprefix("<!--").removesuffix("-->"),))
    _shown_as_code(shown, [r.nodeid for r in head if r.outcome == "failed"][:15])
    assert "New failures" in shown.visible and "Budget violations" in shown.visible
