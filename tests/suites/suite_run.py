"""Run a built-in suite in a subprocess the way the runner does, and read per-test outcomes from its JUnit XML."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests import zygote

REPO = Path(__file__).resolve().parents[2]
# Variables of the surrounding job that would change what the suite runs (declared models, another device).
_JOB_VARIABLES = (
    "COMPILE_CI_TARGETS",
    "COMPILE_CI_CHECKOUT",
    "COMPILE_CI_OUTPUT_DIR",
    "COMPILE_CI_DEVICE",
    "PYTEST_ADDOPTS",
)


@dataclass(frozen=True)
class SuiteRun:
    returncode: int
    outcomes: dict[str, str]  # test name, e.g. "test_x[case]" -> passed | failed | error | skipped
    messages: dict[str, str]  # test name -> failure text, for failed and errored tests
    output: str
    properties: dict[str, dict[str, str]] = field(default_factory=dict)  # test name -> JUnit <property> values

    def named(self, *outcomes: str) -> set[str]:
        return {name for name, outcome in self.outcomes.items() if outcome in outcomes}

    def describe(self) -> str:
        return f"exit code {self.returncode}, outcomes {self.outcomes}\n--- output tail ---\n{self.output[-4000:]}"


def _outcomes(junit: Path) -> tuple[dict[str, str], dict[str, str]]:
    outcomes: dict[str, str] = {}
    messages: dict[str, str] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = case.get("name", "")
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = "failed" if child.tag == "failure" else child.tag
                if child.tag != "skipped":
                    messages[name] = f"{child.get('message', '')}\n{child.text or ''}"
                break
        outcomes[name] = outcome
    return outcomes, messages


def run_suite(
    suite: str,
    selection: str,
    workdir: Path,
    plugin: str | None = None,
    timeout: int = 300,
    plant: str | None = None,
    extra_env: dict[str, str] | None = None,
    deps: Path | None = None,
) -> SuiteRun:
    """``python -m pytest suites/<suite> -k <selection>`` on cpu from a scratch directory, optionally with ``-p
    plugin`` loaded (a planted bug; ``plant`` names a module of tests.suites.planted). Inductor's cache directory is
    inherited, so warm runs stay fast. ``deps``: a site directory from the install phase, which the job's in-job
    install step puts on the path (service/jobs/install_step.py), as for a repository with [install] requirements."""
    if plant:
        plugin = f"tests.suites.planted.{plant}"
    junit = workdir / "junit.xml"
    env = {key: value for key, value in os.environ.items() if key not in _JOB_VARIABLES}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["COMPILE_CI_DEVICE"] = "cpu"
    env.update(extra_env or {})
    command = [
        sys.executable,
        "-m",
        "pytest",
        str(REPO / "suites" / suite),
        "-q",
        "-p",
        "no:cacheprovider",
        "-o",
        "junit_family=xunit1",
    ]
    command += ["-k", selection, f"--junitxml={junit}"] + (["-p", plugin] if plugin else [])
    if deps is not None:
        from service.jobs import install

        command = install.wrap(command, sys.executable, Path(env.get("COMPILE_CI_CHECKOUT", workdir)), deps, False)
    try:
        proc = zygote.run(command, cwd=workdir, env=env, timeout=timeout)  # forked: tests/zygote.py
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"suite {suite!r} did not finish within {timeout} s: {exc}")
    output = proc.stdout + proc.stderr
    if not junit.exists():
        # A crash's innermost frames are where faulthandler starts writing to stderr: keep that start.
        pytest.fail(f"suite {suite!r} wrote no JUnit XML (exit code {proc.returncode}):\n{proc.stdout[-2000:]}\n"
                    f"--- its stderr, from the start ---\n{proc.stderr[:5000]}")
    outcomes, messages = _outcomes(junit)
    properties = {
        case.get("name", ""): {p.get("name", ""): p.get("value", "") for p in case.iter("property")}
        for case in ET.parse(junit).getroot().iter("testcase")
    }
    return SuiteRun(proc.returncode, outcomes, messages, output, properties)
