"""Run a suite (or a repository's tests) as a job that bisects its failures, and read what each test's bisection left:
bisect.json and bisect.log beside its artifacts."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suites.naming import sanitise_nodeid

from .repo_run import RepoRun, run_repo_tests
from .suite_run import REPO, SuiteRun, run_suite

PLANTED = REPO / "tests" / "suites" / "planted"
# The device the planted proofs run on: cpu here; COMPILE_CI_TEST_DEVICE=cuda on a GPU host (docs/suites.md).
DEVICE_ENV = "COMPILE_CI_TEST_DEVICE"


@dataclass(frozen=True)
class Bisected:
    run: SuiteRun | RepoRun
    out: Path

    def result(self, nodeid: str) -> dict[str, Any] | None:
        path = self.out / "tests" / sanitise_nodeid(nodeid) / "bisect.json"
        return json.loads(path.read_text()) if path.exists() else None

    def results(self) -> list[dict[str, Any]]:
        return [json.loads(path.read_text()) for path in sorted((self.out / "tests").glob("*/bisect.json"))]

    def log(self, nodeid: str) -> str:
        return (self.out / "tests" / sanitise_nodeid(nodeid) / "bisect.log").read_text()

    def describe(self) -> str:
        results = {p.parent.name: json.loads(p.read_text()) for p in (self.out / "tests").glob("*/bisect.json")}
        logs = "\n".join(p.read_text() for p in (self.out / "tests").glob("*/bisect.log"))
        return f"{self.run.describe()}\n--- bisections ---\n{json.dumps(results, indent=1)}\n{logs[-6000:]}"


def bisect_suite(suite: str, selection: str, work: Path, plant: str | None, seconds: int = 300, timeout: int = 900,
                 extra_env: dict[str, str] | None = None) -> Bisected:
    """The suite (with a planted bug), as a job (the artifacts plugin) that bisects for up to ``seconds``."""
    work.mkdir(parents=True, exist_ok=True)
    env = {"COMPILE_CI_OUTPUT_DIR": str(work / "out"), "COMPILE_CI_BISECT_SECONDS": str(seconds),
           **({"PYTEST_ADDOPTS": f"-p tests.suites.planted.{plant}"} if plant else {}),
           "COMPILE_CI_DEVICE": os.environ.get(DEVICE_ENV, "cpu"), **(extra_env or {})}
    run = run_suite(suite, selection, work, plugin="suites.plugin", timeout=timeout, extra_env=env)
    return Bisected(run, work / "out")


def bisect_repo(checkout: Path, work: Path, seconds: int = 300, *args: str) -> Bisected:
    """A repository's own tests, as a `repo` job that bisects for up to ``seconds``."""
    run = run_repo_tests(checkout, work, {"COMPILE_CI_BISECT_SECONDS": str(seconds)}, args=list(args))
    return Bisected(run, run.out)


def line_of(path: Path, text: str) -> int:
    """The 1-based line where ``text`` starts a line of ``path`` (after its indentation)."""
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if line.lstrip().startswith(text))
