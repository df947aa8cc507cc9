"""In-job reruns (COMPILE_CI_RERUNS): a test whose call fails runs again until it passes, up to N more times; the
final attempt is what JUnit, progress and artifacts report, and the earlier attempts are named beside it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from suites.reruns import RERUNS_ENV, reruns_from

from .repo_run import run_repo_tests

FLAKY_TESTS = '''import os
from pathlib import Path

import pytest
import torch

COUNTS = Path(os.environ["FLAKY_COUNTS"])


def attempt(name):
    path = COUNTS / name
    number = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(number))
    return number


def test_flaky():
    if attempt("flaky") == 1:
        def twice(x):
            y = torch.sin(x)
            torch._dynamo.graph_break()
            return torch.sin(y)

        torch.compile(twice)(torch.randn(4))
        assert False, "fails on its first attempt only"
    torch.compile(lambda x: torch.cos(x) * 3)(torch.randn(4))


def test_broken():
    attempt("broken")
    assert False, "fails every time"


def test_fine():
    attempt("fine")


@pytest.mark.xfail(reason="a known bug")
def test_known_bug():
    attempt("known")
    assert False


@pytest.fixture
def broken_fixture():
    attempt("fixture")
    raise RuntimeError("setup breaks")


def test_setup_error(broken_fixture):
    pass
'''


def _repository(root: Path) -> tuple[Path, Path]:
    (root / "checkout" / "tests").mkdir(parents=True)
    (root / "checkout" / "tests" / "test_flaky.py").write_text(FLAKY_TESTS)
    (root / "counts").mkdir()
    return root / "checkout", root / "counts"


def _counts(counts: Path) -> dict[str, int]:
    return {path.name: int(path.read_text()) for path in counts.iterdir()}


def test_a_flaky_test_passes_on_its_rerun_and_says_so(tmp_path: Path) -> None:
    checkout, counts = _repository(tmp_path)
    run = run_repo_tests(checkout, tmp_path / "work", {RERUNS_ENV: "2", "FLAKY_COUNTS": str(counts)})
    assert run.returncode == 1, run.describe()
    # Only a failed call is run again: the xfail, the setup error and the passing test ran once each.
    assert _counts(counts) == {"flaky": 2, "broken": 3, "fine": 1, "known": 1, "fixture": 1}
    assert {name: run.outcome(name) for name in run.cases} == {
        "test_flaky": "passed", "test_broken": "failed", "test_fine": "passed", "test_known_bug": "skipped",
        "test_setup_error": "error"}, run.describe()
    assert run.properties("test_flaky") == {"compile_ci_reruns": "failed"}
    assert run.properties("test_broken") == {"compile_ci_reruns": "failed,failed"}
    assert run.properties("test_fine") == {} and run.properties("test_setup_error") == {}
    assert re.search(r"1 failed, 2 passed, 1 xfailed, (\d+ warnings, )?1 error in", run.output), run.describe()

    flaky = run.metrics("tests/test_flaky.py::test_flaky")
    assert flaky["reruns"] == ["failed"] and flaky["outcome"] == "passed"
    assert run.metrics("tests/test_flaky.py::test_broken")["reruns"] == ["failed", "failed"]
    assert run.metrics("tests/test_flaky.py::test_fine")["reruns"] == []
    # The artifacts are the passing attempt's: its one graph (cos), not the first attempt's two (sin), no repro.
    directory = run.test_dir("tests/test_flaky.py::test_flaky")
    codes = sorted(directory.glob("output_code_*.py"))
    assert [c.name for c in codes] == ["output_code_0.py"] and flaky["output_code_files"] == 1
    assert "cos" in codes[0].read_text() and "sin" not in codes[0].read_text()
    assert not (directory / "repro.py").exists()
    assert (run.test_dir("tests/test_flaky.py::test_broken") / "repro.py").exists()
    # Progress counts each test once.
    assert json.loads((run.out / "progress.json").read_text()) == {"done": 5, "total": 5, "current": ""}


def test_without_reruns_a_flaky_test_fails(tmp_path: Path) -> None:
    checkout, counts = _repository(tmp_path)
    run = run_repo_tests(checkout, tmp_path / "work", {"FLAKY_COUNTS": str(counts)})
    assert run.outcome("test_flaky") == "failed" and run.properties("test_flaky") == {}
    assert _counts(counts) == {"flaky": 1, "broken": 1, "fine": 1, "known": 1, "fixture": 1}
    assert run.metrics("tests/test_flaky.py::test_flaky")["reruns"] == []


@pytest.mark.parametrize(("value", "count"), [("", 0), ("0", 0), ("3", 3), (" 2 ", 2)])
def test_reruns_setting(value: str, count: int) -> None:
    assert reruns_from({RERUNS_ENV: value}) == count
    assert reruns_from({}) == 0


@pytest.mark.parametrize("value", ["-1", "two", "1.5", "²", "99999"])
def test_a_bad_reruns_setting_is_a_usage_error(value: str, tmp_path: Path) -> None:
    with pytest.raises(pytest.UsageError, match=f"{RERUNS_ENV}=.*whole number >= 0"):
        reruns_from({RERUNS_ENV: value})


def test_a_bad_reruns_setting_stops_the_job_before_any_test(tmp_path: Path) -> None:
    checkout, counts = _repository(tmp_path)
    run = run_repo_tests(checkout, tmp_path / "work", {RERUNS_ENV: "lots", "FLAKY_COUNTS": str(counts)})
    assert run.returncode == 4 and "COMPILE_CI_RERUNS='lots': expected a whole number >= 0" in run.output
    assert _counts(counts) == {}
