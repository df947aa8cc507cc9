"""Failures are annotated where they happened: in the repository's own code when the traceback reaches it."""

from __future__ import annotations

import pytest

from service.github.annotations import MAX_ANNOTATIONS, declared_target, locate_in_checkout
from service.github.checks import render_check_run
from service.store import Job, Run, TestResult

ROOT = "/var/ci/jobs/abc-repo-cpu/src"
REPO_FILES = {"mypkg/model.py", "tests/test_model.py"}

PYTEST_LONG = f"""def test_model():
>       assert run_model() == 3

{ROOT}/tests/test_model.py:12:
_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _

    def run_model():
>       return forward(1)
E       ValueError: bad shape

{ROOT}/mypkg/model.py:40: ValueError"""

INSIDE_TORCH = f"""{ROOT}/mypkg/model.py:8: in forward
    return torch.compile(f)(x)
/usr/lib/python3/site-packages/torch/_dynamo/eval_frame.py:655: in _fn
    return fn(*args)
E   RuntimeError: boom"""

PYTHON_STYLE = """Traceback (most recent call last):
  File "/checkout/mypkg/model.py", line 21, in forward
    raise ValueError
ValueError"""

RELATIVE = """mypkg/model.py:33: in forward
    return y
suites/correctness/test_correctness.py:90: AssertionError"""


@pytest.mark.parametrize(("details", "roots", "where"), [
    (PYTEST_LONG, [ROOT], ("mypkg/model.py", 40)),           # the deepest frame in the repository
    (INSIDE_TORCH, [ROOT], ("mypkg/model.py", 8)),           # frames in torch are not the repository's
    (PYTHON_STYLE, [ROOT, "/checkout"], ("mypkg/model.py", 21)),  # a container's mount point
    (RELATIVE, [ROOT], ("mypkg/model.py", 33)),              # relative frames only if the file is the repo's
    ("E   assert 1 == 2\nsuites/correctness/test_x.py:5: AssertionError", [ROOT], None),
    ("", [ROOT], None),
])
def test_locate_in_checkout(details: str, roots: list[str], where: tuple[str, int] | None) -> None:
    assert locate_in_checkout(details, roots, REPO_FILES.__contains__) == where


def _job(**fields: object) -> Job:
    base = dict(id="abc-correctness-cpu", run_id="abc", suite="correctness", device="cpu", attempt=1, rerun=0,
                passed=1, failed=0, skipped=0, errors=0, detail="", title="", state="completed")
    return Job(**{**base, **fields})


RUN = Run(id="abc", repo_full_name="o/r", head_sha="f" * 40, repo_id=1, installation_id=2)


def test_annotation_in_repository_code_else_at_the_test() -> None:
    results = [
        TestResult(nodeid="suites/correctness/test_c.py::test_a", outcome="failed", message="ValueError: bad",
                   details="tb", file="suites/correctness/test_c.py", line=10, repo_path="mypkg/model.py",
                   repo_line=40),
        TestResult(nodeid="suites/correctness/test_c.py::test_b", outcome="error", message="fixture broke",
                   details="tb", file="suites/correctness/test_c.py", line=20, repo_path="", repo_line=None),
    ]
    view = render_check_run(RUN, _job(conclusion="failure", failed=2), results, "http://ci/jobs/x")
    assert [(a["path"], a["start_line"], a["annotation_level"]) for a in view.annotations] == [
        ("mypkg/model.py", 40, "failure"), ("suites/correctness/test_c.py", 20, "failure")]
    assert "ValueError: bad" in view.annotations[0]["message"]
    # The suite's test, which "Files changed" cannot show, is named in the message instead.
    assert "(test at suites/correctness/test_c.py:10)" in view.annotations[0]["message"]


@pytest.mark.parametrize(("recorded", "where"), [
    ("mypkg/model.py:17", ("mypkg/model.py", 17)),      # the class or function named in [targets]
    ("mypkg/missing.py:3", None),                       # not a file of the checkout
    ("../../etc/passwd.py:1", None),                    # the job wrote it: no way out of the checkout
    ("/checkout/mypkg/model.py:17", None),
    ("mypkg/model.py:17\nother.py:1", None),
    ("mypkg/model.py", None),
    ("", None),
])
def test_declared_target_location_is_kept_only_inside_the_checkout(recorded: str,
                                                                   where: tuple[str, int] | None) -> None:
    assert declared_target(recorded, REPO_FILES.__contains__) == where


def test_annotations_are_capped() -> None:
    results = [TestResult(nodeid=f"t.py::test_{i}", outcome="failed", message="x", details="", file="t.py", line=i,
                          repo_path="", repo_line=None) for i in range(MAX_ANNOTATIONS + 30)]
    view = render_check_run(RUN, _job(conclusion="failure", failed=len(results)), results, "http://ci/jobs/x")
    assert len(view.annotations) == MAX_ANNOTATIONS


@pytest.mark.parametrize(("conclusion", "button"), [
    ("failure", True), ("timed_out", True), ("cancelled", True), ("success", False), ("neutral", False)])
def test_rerun_button_only_where_a_rerun_can_help(conclusion: str, button: bool) -> None:
    view = render_check_run(RUN, _job(conclusion=conclusion), [], "http://ci/jobs/x")
    assert [a["identifier"] for a in view.actions] == (["rerun"] if button else [])
    assert all(len(a["label"]) <= 20 and len(a["identifier"]) <= 20 for a in view.actions)


def test_running_view_shows_live_progress() -> None:
    job = _job(state="running", progress_done=12, progress_total=40,
               progress_current="suites/correctness/test_c.py::test_mlp[cpu]")
    view = render_check_run(RUN, job, [], "http://ci/jobs/x")
    assert view.status == "in_progress"
    assert view.title == "Running: 12 / 40 tests"
    assert "`suites/correctness/test_c.py::test_mlp[cpu]`" in view.summary


def test_a_rerun_is_a_new_check_run_with_its_own_external_id() -> None:
    first = render_check_run(RUN, _job(state="queued"), [], "u")
    again = render_check_run(RUN, _job(state="queued", rerun=2), [], "u")
    assert (first.external_id, again.external_id) == ("abc-correctness-cpu", "abc-correctness-cpu#2")
    assert first.name == again.name
