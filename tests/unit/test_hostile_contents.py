"""Well-formed files with hostile contents (issue 26): a job's metrics.json, environment.json, progress.json and
coverage.json are valid JSON whose values are built to break a reader (10**400, NaN, NUL for PostgreSQL, a
denominator past any count). Each is read as bounded data: the job's failure or nothing, never an exception that
ends as an infrastructure error, a stuck report or a page's 500."""

from __future__ import annotations

import json
from pathlib import Path

from runners.protocol import RunResult
from service.compare.ledger import ledger_of
from service.jobs.outcome import Attempt, judge, read_attempt
from service.jobs.pipeline import read_progress
from service.web.browser.coverage_view import read_coverage
from service.web.browser.metrics_view import rows
from suites.naming import sanitise_nodeid

NODEID = "tests/test_ok.py::test_fine"
JUNIT = """<testsuites><testsuite name="pytest" tests="1">
<testcase classname="tests.test_ok" name="test_fine" file="tests/test_ok.py" time="0.1"/>
</testsuite></testsuites>"""


def _job(tmp_path: Path, metrics: str) -> Path:
    out = tmp_path / "out"
    (out / "tests" / sanitise_nodeid(NODEID)).mkdir(parents=True)
    (out / "junit.xml").write_text(JUNIT)
    (out / "tests" / sanitise_nodeid(NODEID) / "metrics.json").write_text(metrics)
    return out


def test_numbers_past_any_measurement_are_dropped_not_raised(tmp_path: Path) -> None:
    huge = "1" + "0" * 400
    out = _job(tmp_path, f'{{"compile_time_s": {huge}, "graphs": {huge}, "duration_s": 1e999, '
                         f'"graph_break_reasons": ["a\\u0000b"], "recompiles": 2}}')
    attempt = read_attempt(out, [], tmp_path)
    (record,) = attempt.records
    assert record.metrics["compile_time_s"] is None and record.metrics["graphs"] is None
    assert record.metrics["recompiles"] == 2 and "\x00" not in json.dumps(record.metrics)
    ledger = ledger_of(record.metrics)  # the judgement's reading of them: no OverflowError
    assert ledger.compile_time_s is None and ledger.recompiles == 2
    assert dict(rows(record.metrics))["graphs"] == ""  # the page shows nothing, not a 500
    assert judge(RunResult(0, 1.0), attempt).title == "1 passed"


def test_nan_in_metrics_is_the_jobs_invalid_output(tmp_path: Path) -> None:
    out = _job(tmp_path, '{"compile_time_s": NaN}')
    attempt = read_attempt(out, [], tmp_path)
    assert judge(RunResult(0, 1.0), attempt).title == "Invalid output"
    assert "NaN" not in json.dumps(attempt.records[0].metrics)


def test_hostile_environment_progress_and_coverage(tmp_path: Path) -> None:
    out = _job(tmp_path, "{}")
    (out / "environment.json").write_text('["not", "an", "object"]')
    (out / "progress.json").write_text('{"done": 1, "total": 1e999, "current": "x\\u0000y"}')
    (out / "coverage.json").write_text(f'{{"denominator": {"9" * 30}, "covered": ["add"]}}')
    attempt = read_attempt(out, [], tmp_path)
    assert judge(RunResult(0, 1.0), attempt).title == "Invalid output"
    assert ("environment.json", "not the JSON object of short strings the suites write") in attempt.output.problems
    assert read_progress(out) == (1, 0, "x\ufffdy")
    assert read_coverage(out) is None


def test_a_job_stopped_for_its_cache_layer_says_so() -> None:
    outcome = judge(RunResult(None, 30.0, cache_over_cap=True), Attempt())
    assert (outcome.conclusion.value, outcome.title) == ("failure", "Compile cache over its cap")
