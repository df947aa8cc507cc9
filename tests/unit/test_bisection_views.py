"""A failing test's bisection as the service reads and shows it: one line in the check run's failure text, the
summary's and the sticky comment's new-failure lists; and what a job can forge in its bisect.json (mentions,
backticks, HTML, a huge or linked file) shown inert or not at all."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest

from service.compare.bisection import MAX_RESULT_BYTES, Bisection, read_bisection, read_bisections
from service.compare.budgets import Budgets
from service.compare.comment import MARKER, CheckSummary, render_comment
from service.compare.job_verdict import job_verdict
from service.compare.judgement import BaseInfo, BaseStatus, judge
from service.github.checks import render_check_run
from service.github.checks import test_url as url_of_test
from service.github.markdown import clean
from service.store import TestResult
from suites.naming import sanitise_nodeid
from tests.rendered import Page, assert_inert
from tests.rows import job_row, run_row
from tests.unit.test_github_markdown import HOSTILE

URL = "http://ci.example.test/jobs/abc-correctness-cpu"
READY = BaseInfo(BaseStatus.READY, "b" * 40, "base", "base run", url="http://ci.example.test/jobs/base-cpu")
NODEID = "passes/test_passes.py::test_declared_pass[fuse]"
PLACE = "torch._inductor.config.post_grad_custom_post_pass"
FOUND: dict[str, Any] = {
    "nodeid": NODEID, "status": "found", "backend": "inductor", "subsystem": "post_grad_passes", "number": 17,
    "names": ["post_grad_custom_post_pass"], "reason": "", "runs": 19, "seconds": 12.5,
    "replay": "TORCH_BISECT_BACKEND=inductor TORCH_BISECT_SUBSYSTEM=post_grad_passes TORCH_BISECT_MAX=17",
    "suspect": {"verdict": "yours", "count": 1, "changes": [{"place": PLACE, "where": "your_pkg/passes.py:42"}],
                "said": "right with the 1 change of the repository's to torch's compiler taken out"},
    "place": PLACE, "where": "your_pkg/passes.py:42",
}


def _left(tests: Path, data: object, nodeid: str = NODEID) -> Path:
    """What the job leaves: bisect.json beside the test's other artifacts."""
    folder = tests / sanitise_nodeid(nodeid)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "bisect.json").write_text(data if isinstance(data, str) else json.dumps(data))
    return folder


def _failing(base_outcome: str = "passed") -> tuple[list[TestResult], list[TestResult]]:
    head = [TestResult(nodeid=NODEID, outcome="failed", message="compiled result differs from eager", details="E",
                       file="t.py", line=3, repo_path="")]
    return head, [TestResult(nodeid=NODEID, outcome=base_outcome, file="t.py", line=3, repo_path="")]


def _shown(tests: Path, base_outcome: str = "passed") -> tuple[Page, Page, Page]:
    """The check run's failure text and summary, and the sticky comment, as GitHub renders them."""
    culprits = read_bisections(tests, [NODEID])
    head, base = _failing(base_outcome)
    judgement = judge(head, base, READY, Budgets(), culprits=culprits)
    view = render_check_run(run_row(), job_row(failed=1, conclusion="failure"), head, URL, judgement, culprits)
    checks = [CheckSummary("passes (cpu)", job_verdict("failure", "", "1 failed", judgement), URL, judgement,
                           lambda nodeid: url_of_test(URL, nodeid))]
    comment = render_comment("f" * 40, "b" * 40, checks)
    marker = MARKER.removeprefix("<!--").removesuffix("-->")
    return (assert_inert(view.text, our_urls=(URL,)), assert_inert(view.summary, our_urls=(URL, READY.url)),
            assert_inert(comment, our_urls=(URL,), our_comments=(marker,)))


def test_a_culprit_is_one_line_where_the_maintainer_looks(tmp_path: Path) -> None:
    _left(tmp_path, FOUND)
    for page in _shown(tmp_path):
        assert ("wrong from inductor · post_grad_passes #17 (post_grad_custom_post_pass) · red only with your change "
                f"to {PLACE} (your_pkg/passes.py:42)") in page.visible, page.visible
        # "#17" in code: outside it GitHub would link issue 17
        assert {"inductor", "post_grad_passes #17", PLACE, "your_pkg/passes.py:42"} <= set(page.codes)


@pytest.mark.parametrize(("base_outcome", "said"), [("passed", "upstream, new here"),
                                                    ("failed", "upstream, failing at the base too")])
def test_upstream_says_whether_the_base_fails_it_too(tmp_path: Path, base_outcome: str, said: str) -> None:
    _left(tmp_path, {**FOUND, "place": "", "where": "", "suspect": {"verdict": "upstream", "count": 0}})
    text, summary, _comment = _shown(tmp_path, base_outcome)
    assert f"red on stock torch too ({said})" in text.visible and "your change" not in text.visible
    assert f"red on stock torch too ({said})" in summary.visible


def test_wrong_under_dynamos_capture_alone_is_not_called_upstream(tmp_path: Path) -> None:
    # The sandbox's buggy model keeps a call counter in forward(): wrong from `eager`, where no compiler stage runs.
    _left(tmp_path, {**FOUND, "backend": "eager", "subsystem": "", "number": None, "names": [], "place": "",
                     "where": "", "suspect": {"verdict": "upstream", "count": 0}})
    for page in _shown(tmp_path, "passed"):
        assert "red on stock torch too (under dynamo's capture alone: the model's Python or dynamo" in page.visible, \
            page.visible
        assert "upstream" not in page.visible, page.visible


def test_a_change_that_could_not_be_taken_out_is_named_and_stock_torch_is_not_claimed(tmp_path: Path) -> None:
    # The planted conv_bn_wrong_scale: freezing's folding handlers wrapped in place, which restored() cannot undo.
    entry = "torch._inductor.fx_passes.freezing_patterns.binary_folding_pass.patterns[aten.mul.Tensor]"
    _left(tmp_path, {**FOUND, "subsystem": "", "number": None, "names": [], "place": "", "where": "",
                     "suspect": {"verdict": "inseparable", "count": 4,
                                 "changes": [{"place": entry, "where": "stack/folding.py:25"}]}})
    for page in _shown(tmp_path, "passed"):
        assert (f"wrong from inductor · stock torch not tried: your change to {entry} (stack/folding.py:25) cannot be "
                "taken out in-process") in page.visible, page.visible
        assert "stock torch too" not in page.visible and "upstream" not in page.visible, page.visible


def test_several_changes_are_named_without_picking_one(tmp_path: Path) -> None:
    changes = [{"place": f"torch._inductor.lowering.lowerings[aten.op{n}.default]", "where": f"pkg/ops.py:{n}"}
               for n in range(5)]
    _left(tmp_path, {**FOUND, "subsystem": "", "number": None, "names": [], "place": "", "where": "",
                     "suspect": {"verdict": "yours", "count": 7, "changes": changes}})
    text, _summary, _comment = _shown(tmp_path)
    assert "wrong from inductor · red only with your compiler changes (7: " in text.visible
    assert "red only with your change to" not in text.visible


@pytest.mark.parametrize("status", ["flaky", "budget", "unbisectable", "inconclusive", "unavailable"])
def test_no_culprit_says_why_and_names_none(tmp_path: Path, status: str) -> None:
    reason = "run again, its judgement found nothing wrong"
    _left(tmp_path, {"nodeid": NODEID, "status": status, "reason": reason, "suspect": None})
    for page in _shown(tmp_path):
        assert reason in page.visible and "wrong from" not in page.visible


@pytest.mark.parametrize("text", HOSTILE)
def test_a_forged_bisection_with_mentions_backticks_and_html_is_inert(tmp_path: Path, text: str) -> None:
    forged = copy.deepcopy(FOUND)
    forged.update(names=[text, text], place=text, reason=text)
    forged["suspect"]["changes"] = [{"place": text, "where": ""}]
    _left(tmp_path, forged)
    for page in _shown(tmp_path):  # assert_inert: no ping, link, image, HTML or reference outside code
        shown = " ".join(clean(text.replace("\x00", "\ufffd")).split("\n"))  # read_json_data keeps no NUL
        assert shown in " ".join(page.codes) or not text.strip()
    _left(tmp_path, {**forged, "status": "flaky", "suspect": {"verdict": "yours", "count": 2,
                                                              "changes": [{"place": text, "where": ""}] * 2}})
    _shown(tmp_path)
    # the pair's "cannot be taken out" line names a place the job wrote too
    _left(tmp_path, {**forged, "place": "", "suspect": {"verdict": "inseparable", "count": 1,
                                                        "changes": [{"place": text, "where": "pkg/x.py:3"}]}})
    for page in _shown(tmp_path):
        assert "stock torch not tried" in page.visible or not text.strip(), page.visible


@pytest.mark.parametrize("forged", [
    {"backend": "inductor @octocat"}, {"subsystem": "post_grad_passes`"}, {"where": "a b.py:1"},
    {"where": "x.py:1`@octocat"}, {"number": -1}, {"number": True}, {"number": "17"}, {"status": "found!"},
    {"names": "not a list"}, {"names": [{"nested": 1}]}, {"reason": "x" * 5000}, {"replay": "rm -rf /"},
    {"suspect": {"verdict": "mine"}}, {"suspect": {"verdict": "yours", "count": True}},
    {"suspect": {"verdict": "yours", "count": 1, "changes": [{"place": "p", "where": "not a place"}]}},
])
def test_a_bisection_not_in_the_shape_the_suites_write_is_none(tmp_path: Path, forged: dict[str, Any]) -> None:
    folder = _left(tmp_path, {**FOUND, **forged})
    assert read_bisection(folder) is None
    text, _summary, _comment = _shown(tmp_path)
    assert "wrong from" not in text.visible and "octocat" not in text.visible


@pytest.mark.parametrize("planted", ["huge", "link", "fifo", "nan", "deep", "not json", "a list"])
def test_a_huge_linked_or_odd_bisection_file_is_none(tmp_path: Path, planted: str) -> None:
    folder = _left(tmp_path / "tests", FOUND)
    result = folder / "bisect.json"
    if planted == "huge":
        result.write_text(json.dumps({**FOUND, "pad": "x" * MAX_RESULT_BYTES}))
    elif planted in ("link", "fifo"):
        result.unlink()
        elsewhere = tmp_path / "elsewhere.json"  # a valid bisection outside the job's folder
        elsewhere.write_text(json.dumps(FOUND))
        result.symlink_to(elsewhere) if planted == "link" else os.mkfifo(result)  # a FIFO never answers
    elif planted == "nan":
        result.write_text(json.dumps(FOUND).replace("12.5", "NaN"))
    elif planted == "deep":
        result.write_text("[" * 100_000 + "]" * 100_000)
    elif planted == "not json":
        result.write_bytes(b"\xff\x00{")
    else:
        result.write_text(json.dumps([FOUND]))
    assert read_bisection(folder) is None
    assert read_bisections(tmp_path / "tests", [NODEID]) == {}


def test_what_the_suites_write_is_read_back_whole(tmp_path: Path) -> None:
    assert read_bisection(_left(tmp_path, FOUND)) == Bisection(
        status="found", backend="inductor", subsystem="post_grad_passes", number=17,
        names=("post_grad_custom_post_pass",), suspect="yours", changes=1,
        listed=((PLACE, "your_pkg/passes.py:42"),), place=PLACE, where="your_pkg/passes.py:42", replay=FOUND["replay"])
