"""Run a repository's own tests the way a `repo` job does (the capture plugin loaded), and read what it left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suites.naming import sanitise_nodeid

from .suite_run import _JOB_VARIABLES, REPO


@dataclass(frozen=True)
class RepoRun:
    returncode: int
    output: str
    out: Path
    cases: dict[str, ET.Element]  # testcase name -> its JUnit element

    def outcome(self, name: str) -> str:
        case = self.cases[name]
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                return "failed" if child.tag == "failure" else child.tag
        return "passed"

    def properties(self, name: str) -> dict[str, str]:
        return {p.get("name", ""): p.get("value", "") for p in self.cases[name].iter("property")}

    def test_dir(self, nodeid: str) -> Path:
        return self.out / "tests" / sanitise_nodeid(nodeid)

    def metrics(self, nodeid: str) -> dict[str, Any]:
        return json.loads((self.test_dir(nodeid) / "metrics.json").read_text())

    def describe(self) -> str:
        return f"exit code {self.returncode}\n--- output tail ---\n{self.output[-4000:]}"


def run_repo_tests(checkout: Path, work: Path, extra_env: dict[str, str] | None = None,
                   timeout: int = 300, args: list[str] | None = None) -> RepoRun:
    """The pipeline's repo-suite command on `checkout/tests` (and pytest's `args`), from a scratch directory, on
    cpu."""
    out = work / "out"
    work.mkdir(parents=True, exist_ok=True)
    env = {key: value for key, value in os.environ.items() if key not in (*_JOB_VARIABLES, "COMPILE_CI_RERUNS")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.update({"COMPILE_CI_DEVICE": "cpu", "COMPILE_CI_CHECKOUT": str(checkout), "COMPILE_CI_OUTPUT_DIR": str(out)})
    env.update(extra_env or {})
    junit = out / "junit.xml"
    command = [sys.executable, "-m", "suites.pytest_entry", "-q", "-p", "no:cacheprovider", "-p", "suites.plugin",
               "-o", "junit_family=xunit1", f"--junitxml={junit}", "--rootdir", str(checkout), str(checkout / "tests"),
               *(args or [])]
    proc = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
    cases = {case.get("name", ""): case for case in ET.parse(junit).getroot().iter("testcase")} \
        if junit.exists() else {}
    return RepoRun(proc.returncode, proc.stdout + proc.stderr, out, cases)
