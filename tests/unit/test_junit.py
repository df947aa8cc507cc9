"""JUnit XML from pytest -> test records with node ids, outcomes and locations."""

from pathlib import Path

import pytest

from service.jobs.junit import JUnitError, parse_junit

XML = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="1" skipped="1" tests="4">
<testcase classname="test_correctness.TestInference" name="test_mlp[cpu]" file="test_correctness.py" line="41"
  time="1.5"/>
<testcase classname="test_correctness" name="test_declared_model[counting_scale]" file="test_correctness.py"
  line="99" time="0.7"><properties><property name="compile_ci_target" value="zoo/models.py:12"/></properties>
<failure message="AssertionError: outputs differ">Traceback ...
AssertionError: outputs differ</failure></testcase>
<testcase classname="test_correctness" name="test_cuda_only" file="test_correctness.py" line="120" time="0">
<skipped type="pytest.skip" message="CUDA is not available">skip</skipped></testcase>
<testcase classname="test_correctness" name="test_broken_fixture" time="0"><error message="fixture failed"/></testcase>
</testsuite></testsuites>
"""


def test_parses_outcomes_node_ids_and_lines(tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    path.write_text(XML)
    records = parse_junit(path)
    assert [(r.nodeid, r.outcome) for r in records] == [
        ("test_correctness.py::TestInference::test_mlp[cpu]", "passed"),
        ("test_correctness.py::test_declared_model[counting_scale]", "failed"),
        ("test_correctness.py::test_cuda_only", "skipped"),
        ("test_correctness::test_broken_fixture", "error"),
    ]
    failed = records[1]
    assert failed.message == "AssertionError: outputs differ"
    assert "Traceback" in failed.details
    assert (failed.file, failed.line, failed.duration_s) == ("test_correctness.py", 100, 0.7)
    assert failed.repo_path == "zoo/models.py:12"  # the declared target's definition, checked by the pipeline


def test_truncated_xml_is_an_error_not_an_empty_result(tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    path.write_text(XML[:300])
    with pytest.raises(JUnitError):
        parse_junit(path)
