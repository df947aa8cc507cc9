"""Per-test artifacts (loaded with `-p suites.plugin`): generated code, compile metrics and failure repros.

Writes `$COMPILE_CI_OUTPUT_DIR/tests/<sanitised node id>/`: `output_code_<n>.py` for every graph inductor
compiled (the wrapper with its C++ or Triton kernels), `metrics.json`, and `repro.py` when the test failed.
Active for the built-in suites and for the repository's own tests alike; without the variable it does nothing.
"""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from suites.naming import sanitise_nodeid

OUTPUT_ENV = "COMPILE_CI_OUTPUT_DIR"
FORWARDED_ENV = ("COMPILE_CI_DEVICE", "COMPILE_CI_TARGETS", "COMPILE_CI_CHECKOUT")


def test_dir(output_dir: Path, nodeid: str) -> Path:
    return output_dir / "tests" / sanitise_nodeid(nodeid)


def _repro(item: pytest.Item) -> str:
    env = {name: os.environ[name] for name in FORWARDED_ENV if name in os.environ}
    path = str(item.path)
    selector = "::".join([path, *item.nodeid.split("::")[1:]])
    return textwrap.dedent(f'''\
        """Reproduce {item.nodeid} outside compile-ci: `python repro.py` (needs torch and pytest).

        It re-runs exactly this test with the job's device and declared targets and prints inductor's
        generated code. Adjust COMPILE_CI_CHECKOUT if your checkout lives elsewhere.
        """
        import os
        import sys

        import pytest

        os.environ.update({json.dumps(env, indent=4)})
        os.environ.setdefault("TORCH_LOGS", "output_code")
        sys.exit(pytest.main([{selector!r}, "-x", "-p", "no:cacheprovider"]))
        ''')


def _outcome(report: pytest.TestReport) -> str:
    """pytest's words: an expected failure is `xfailed`, an unexpected pass `xpassed` (JUnit cannot say the last)."""
    if hasattr(report, "wasxfail"):
        return "xpassed" if report.passed else "xfailed" if report.skipped else report.outcome
    return report.outcome


class ArtifactWriter:
    def __init__(self, output_dir: Path) -> None:
        self.output_dir = output_dir
        self.captures: dict[str, Any] = {}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        # Imported here so that loading the plugin costs nothing for suites that never compile.
        from suites.harness import CompileCapture

        capture = CompileCapture()
        with capture.active():
            yield
        self.captures[item.nodeid] = capture

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
        outcome = yield
        report: pytest.TestReport = outcome.get_result()
        if report.when == "call" or (report.when == "setup" and not report.passed):
            self._write(item, report)

    def _write(self, item: pytest.Item, report: pytest.TestReport) -> None:
        directory = test_dir(self.output_dir, item.nodeid)
        directory.mkdir(parents=True, exist_ok=True)
        capture = self.captures.pop(item.nodeid, None)
        codes = capture.codes if capture is not None else []
        for index, code in enumerate(codes):
            (directory / f"output_code_{index}.py").write_text(code)
        metrics = {
            "nodeid": item.nodeid,
            "outcome": _outcome(report),
            "duration_s": round(report.duration, 4),
            "output_code_files": len(codes),
            # What the test recorded with record_property (a declared pass's call and match counters, say).
            **{str(key): value for key, value in item.user_properties if isinstance(value, int | float | str)},
            **(capture.metrics if capture is not None else {}),
        }
        (directory / "metrics.json").write_text(json.dumps(metrics, indent=2))
        if report.failed:
            (directory / "repro.py").write_text(_repro(item))


class ProgressWriter:
    """`progress.json` (done, total, current) for the service's live check-run progress.

    Written to a temporary name and renamed, so the worker polling it never reads half a file.
    """

    def __init__(self, output_dir: Path) -> None:
        self.path = output_dir / "progress.json"
        self.total = 0
        self.done = 0

    def _write(self, current: str) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"done": self.done, "total": self.total, "current": current}))
        tmp.replace(self.path)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.total = len(session.items)
        self._write("")

    def pytest_runtest_logstart(self, nodeid: str, location: object) -> None:
        self._write(nodeid)

    def pytest_runtest_logfinish(self, nodeid: str, location: object) -> None:
        self.done += 1
        self._write("")


def record_environment(output_dir: Path) -> None:
    """Which torch and device really ran the job (the check run's summary), for the repository's own tests too."""
    import platform

    import torch

    cuda = torch.cuda.is_available()
    info = {
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "device": os.environ.get("COMPILE_CI_DEVICE", "").strip().lower() or "cpu",
        "device_name": torch.cuda.get_device_name(0) if cuda else platform.processor() or platform.machine(),
        "cuda_version": torch.version.cuda,
    }
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "environment.json").write_text(json.dumps(info, indent=2))


def pytest_configure(config: pytest.Config) -> None:
    output = os.environ.get(OUTPUT_ENV)
    if output and not config.pluginmanager.has_plugin("compile-ci-artifacts"):
        record_environment(Path(output))
        config.pluginmanager.register(ArtifactWriter(Path(output)), "compile-ci-artifacts")
        config.pluginmanager.register(ProgressWriter(Path(output)), "compile-ci-progress")
