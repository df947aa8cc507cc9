"""What a check run shows on GitHub for each job state, within GitHub's limits."""

from datetime import datetime

from service.github.checks import MAX_TEXT, render_check_run, truncate
from service.store import Job, Run, TestResult

URL = "http://ci.example.test/jobs/abc-correctness-cpu"


def _run() -> Run:
    return Run(id="abc", repo_full_name="o/r", head_sha="f" * 40, repo_id=1, installation_id=2)


def _job(**fields: object) -> Job:
    base = dict(id="abc-correctness-cpu", run_id="abc", suite="correctness", device="cpu", attempt=1,
                passed=0, failed=0, skipped=0, errors=0, detail="", title="", torch_version="2.13.0", runner="local")
    return Job(**{**base, **fields})


def test_queued_and_running() -> None:
    queued = render_check_run(_run(), _job(state="queued"), [], URL)
    assert (queued.status, queued.name, queued.external_id, queued.details_url) == (
        "queued", "correctness (cpu)", "abc-correctness-cpu", URL)
    assert render_check_run(_run(), _job(state="running"), [], URL).status == "in_progress"


def test_completed_failure_names_the_failing_tests() -> None:
    job = _job(state="completed", conclusion="failure", passed=7, failed=1, skipped=2,
               started_at=datetime(2026, 1, 1, 0, 0, 0), finished_at=datetime(2026, 1, 1, 0, 0, 42))
    results = [TestResult(nodeid="t.py::test_declared_model[counting_scale]", outcome="failed",
                          message="AssertionError: compiled differs from eager\nmore", details="Traceback")]
    view = render_check_run(_run(), job, results, URL)
    assert view.conclusion == "failure"
    assert view.title == "1 failed, 7 passed, 2 skipped"  # pytest's words and order
    assert "`t.py::test_declared_model[counting_scale]`: `AssertionError: compiled differs from eager`" in view.summary
    assert "| correctness | cpu | 7 | 1 | 0 | 2 | 0 | 0 | 42.0 s | 2.13.0 | local |" in view.summary
    assert "Traceback" in view.text


def test_huge_failure_output_is_cut_below_githubs_limit_with_a_link() -> None:
    results = [TestResult(nodeid=f"t.py::test_{i}", outcome="failed", message="x", details="y" * 7000)
               for i in range(30)]
    view = render_check_run(_run(), _job(state="completed", conclusion="failure", failed=30), results, URL)
    assert len(view.text) < MAX_TEXT
    assert view.text.endswith(f"{URL}/log")
    assert "and 10 more" in view.summary


def test_truncate_keeps_short_text_and_cuts_long_text_at_a_line_end() -> None:
    assert truncate("short", 10, "http://x") == "short"
    cut = truncate("a" * 30 + "\n" + "b" * 70, 80, "http://x")
    assert cut == "a" * 30 + "\n\n… truncated; the full text is at http://x"


def test_failing_test_bullet_keeps_the_figures_after_a_colon() -> None:
    results = [TestResult(nodeid="t.py::test_scale", outcome="failed",
                          message="AssertionError: compiled result differs from eager beyond tolerance:\n"
                                  "max abs diff 0.5 at index (0, 3)\nmore")]
    view = render_check_run(_run(), _job(state="completed", conclusion="failure", failed=1), results, URL)
    assert ("- `t.py::test_scale`: `AssertionError: compiled result differs from eager beyond tolerance: "
            "max abs diff 0.5 at index (0, 3)`") in view.summary
