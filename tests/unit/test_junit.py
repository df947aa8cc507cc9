"""JUnit XML from pytest -> test records with node ids, outcomes and locations."""

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


def test_parses_outcomes_node_ids_and_lines() -> None:
    records = parse_junit(XML.encode())
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


def test_truncated_xml_is_an_error_not_an_empty_result() -> None:
    with pytest.raises(JUnitError):
        parse_junit(XML[:300].encode())


# What a job could leave as its junit.xml: each is the job's failure (JUnitError), never another exception.
HOSTILE = {
    "entity expansion": '<?xml version="1.0"?><!DOCTYPE t [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;">]>'
                        '<testsuite><testcase name="x">&b;</testcase></testsuite>',
    "external entity": '<?xml version="1.0"?><!DOCTYPE t [<!ENTITY k SYSTEM "file:///etc/passwd">]>'
                       '<testsuite><testcase name="&k;"/></testsuite>',
    "not xml": "\x00\x01 binary junk",
}


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_junit_is_refused_as_the_jobs_problem(name: str) -> None:
    with pytest.raises(JUnitError):
        parse_junit(HOSTILE[name].encode())


def test_deep_nesting_is_parsed_without_recursion() -> None:
    assert parse_junit(("<a>" * 100_000 + "</a>" * 100_000).encode()) == []


def test_odd_attributes_are_read_as_nothing_rather_than_crashing() -> None:
    xml = ('<testsuite><testcase classname="m" name="t" time="NaN" line="²"/>'
           '<testcase classname="m" name="u" time="soon" line="-4"/>'
           '<testcase classname="m" name="v" time="-1e300" line="99999999999999999999"/></testsuite>')
    records = parse_junit(xml.encode())
    assert [(r.nodeid, r.duration_s, r.line) for r in records] == [("m::t", 0.0, None), ("m::u", 0.0, None),
                                                                   ("m::v", 0.0, None)]
