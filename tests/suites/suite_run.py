"""Run one built-in suite in a subprocess the way a runner does, optionally with a planted-bug plugin loaded."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
# The service's own settings must not leak into the suite: it runs as a repository's job would.
_DROPPED_ENV = ("COMPILE_CI_TARGETS", "COMPILE_CI_CHECKOUT", "COMPILE_CI_OUTPUT_DIR", "PYTEST_ADDOPTS")


@dataclass(frozen=True)
class SuiteRun:
    returncode: int
    outcomes: dict[str, str]  # test name (with parameters) -> passed | failed | error | skipped
    output: str

    def named(self, outcome: str) -> set[str]:
        return {name for name, result in self.outcomes.items() if result == outcome}


def run_suite(suite: str, selection: str, workdir: Path, plant: str | None = None) -> SuiteRun:
    """``pytest suites/<suite> -k <selection>`` from ``workdir``; ``plant`` names a module of tests.suites.planted."""
    junit = workdir / "junit.xml"
    command = [sys.executable, "-m", "pytest", str(REPO_ROOT / "suites" / suite), "-q", "-p", "no:cacheprovider",
               "-k", selection, f"--junitxml={junit}"]
    if plant:
        command += ["-p", f"tests.suites.planted.{plant}"]
    env = {name: value for name, value in os.environ.items() if name not in _DROPPED_ENV}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")]))
    env["COMPILE_CI_DEVICE"] = "cpu"
    done = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    assert junit.exists(), f"pytest wrote no JUnit XML (exit {done.returncode}):\n{output[-4000:]}"
    return SuiteRun(done.returncode, _outcomes(junit), output)


def _outcomes(junit: Path) -> dict[str, str]:
    outcomes = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        children = {child.tag for child in case}
        outcome = next((tag for tag in ("failure", "error", "skipped") if tag in children), "passed")
        outcomes[case.get("name", "")] = {"failure": "failed"}.get(outcome, outcome)
    return outcomes
