"""JUnit XML (as pytest writes it with junit_family=xunit1) -> test records."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from service.store import TestRecord

TARGET_PROPERTY = "compile_ci_target"  # suites/plugin.py: where the failing test's declared target is defined


class JUnitError(ValueError):
    pass


def parse_junit(path: Path) -> list[TestRecord]:
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as exc:
        raise JUnitError(f"cannot read {path.name}: {exc}") from exc
    return [_record(case) for case in root.iter("testcase")]


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
            outcome, message, details = result, child.get("message", ""), (child.text or "")
            if child.get("type") == "pytest.xfail":  # an expected failure, not a skip (pytest's own summary agrees)
                outcome = "xfailed"
            break
    line = case.get("line")
    target = next((p.get("value", "") for p in case.iter("property") if p.get("name") == TARGET_PROPERTY), "")
    return TestRecord(
        nodeid=_nodeid(case),
        outcome=outcome,
        duration_s=float(case.get("time") or 0.0),
        message=message,
        details=details,
        file=case.get("file", ""),
        # pytest writes the 0-based line of the test function's definition.
        line=int(line) + 1 if line and line.isdigit() else None,
        # Unchecked here: the pipeline keeps it only if it names a file of the checkout.
        repo_path=target,
    )
