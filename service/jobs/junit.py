"""JUnit XML (as pytest writes it with junit_family=xunit1) -> test records. The job wrote it: any shape is refused
with a JUnitError (the job's failure), never an exception that would read as the service's."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

from service.store import TestRecord

TARGET_PROPERTY = "compile_ci_target"  # suites/plugin.py: where the failing test's declared target is defined


class JUnitError(ValueError):
    pass


MAX_TESTCASES = 200_000
MAX_NODEID = 2000
MAX_TEXT = 1_000_000  # a failure's text, per test (the store and pages cut it further)


def parse_junit(data: bytes) -> list[TestRecord]:
    # pytest never writes a DTD; one can only be there to expand entities (a "billion laughs").
    if b"<!DOCTYPE" in data or b"<!ENTITY" in data:
        raise JUnitError("junit.xml declares a DTD, which pytest never writes")
    try:
        root = ET.fromstring(data)
        cases = list(root.iter("testcase"))
        if len(cases) > MAX_TESTCASES:
            raise JUnitError(f"junit.xml holds more than {MAX_TESTCASES} test cases")
        return [_record(case) for case in cases]
    except (ET.ParseError, ValueError, RecursionError) as exc:
        raise JUnitError(f"junit.xml is not the JUnit XML pytest writes: {exc}") from exc


def _nodeid(case: ET.Element) -> str:
    name = case.get("name", "")
    classname = case.get("classname", "")
    file = case.get("file", "")
    if not file:
        return f"{classname}::{name}" if classname else name
    module = file.removesuffix(".py").replace("/", ".")
    rest = classname[len(module) + 1:] if classname.startswith(module) else ""
    parts = [file, *filter(None, rest.split(".")), name]
    return "::".join(parts)


def _record(case: ET.Element) -> TestRecord:
    outcome, message, details = "passed", "", ""
    for tag, result in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
        child = case.find(tag)
        if child is not None:
            outcome, message, details = result, child.get("message", "")[:MAX_TEXT], (child.text or "")[:MAX_TEXT]
            if child.get("type") == "pytest.xfail":  # an expected failure, not a skip (pytest's own summary agrees)
                outcome = "xfailed"
            break
    line = case.get("line")
    target = next((p.get("value", "") for p in case.iter("property") if p.get("name") == TARGET_PROPERTY), "")
    return TestRecord(
        nodeid=_nodeid(case)[:MAX_NODEID],
        outcome=outcome,
        duration_s=_seconds(case.get("time")),
        message=message,
        details=details,
        file=case.get("file", "")[:MAX_NODEID],
        # pytest writes the 0-based line of the test function's definition.
        line=int(line) + 1 if line and line.isascii() and line.isdigit() and len(line) <= 9 else None,
        # Unchecked here: the pipeline keeps it only if it names a file of the checkout.
        repo_path=target,
    )


def _seconds(raw: str | None) -> float:
    try:
        value = float(raw or 0.0)
    except ValueError:
        return 0.0
    return value if math.isfinite(value) and value >= 0 else 0.0
