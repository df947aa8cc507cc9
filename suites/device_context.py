"""A lost CUDA context ends its process's part of the job, never the job: the tests after it run in a fresh process.

A kernel that traps (a device-side assert, an illegal address, a launch failure) leaves the process's CUDA context
unusable: every later CUDA call of that process fails, so every later test would error at its setup without being
judged. Here:

- after each test's call, where the process has a CUDA context, the device is synchronised (kernels are launched
  asynchronously: the error is reported by whatever CUDA call comes next). A test whose call passed although one of
  its kernels trapped is reported failed, with the device's error: the previous test ended with a clean synchronise,
  so the trap is this test's.
- after a test whose process lost its context, the session stops (pytest's ``shouldstop``) and the node ids of the
  tests not yet run are written to ``$COMPILE_CI_CONTINUE_FILE``. The job's entry (suites/pytest_entry.py) runs those
  tests in a new process (``$COMPILE_CI_CONTINUE_ONLY``), whose JUnit results are merged into the job's.

Each continuation runs at least the test it starts with, so a job ends after at most as many processes as it has
tests (bounded by ``MAX_PROCESSES`` and the job's deadline). The probes are a list, so a test can stand in for a GPU.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import pytest

CONTINUE_FILE_ENV = "COMPILE_CI_CONTINUE_FILE"  # where a session that lost its device writes the tests left
CONTINUE_ONLY_ENV = "COMPILE_CI_CONTINUE_ONLY"  # a continuation: the file of node ids it runs, in that order
# Registered (as a name) by a shard that takes its tests while it runs when it is a continuation: it runs the tests
# its earlier process had taken and left first, then takes more (suites/sharding.py), so nothing is filtered here.
RESUMES_TAKING = "compile-ci-resumes-taking"
MAX_PROCESSES = 16


def _cuda_error() -> str | None:
    """The error a CUDA synchronise raises in this process, where it has a CUDA context; None when it is usable."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    try:
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - torch.AcceleratorError, or RuntimeError on older torch
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:400]
    return None


PROBES: list[Callable[[], str | None]] = [_cuda_error]


def device_error() -> str | None:
    for probe in PROBES:
        error = probe()
        if error:
            return error
    return None


class ContextWatch:
    def __init__(self, continue_file: Path | None) -> None:
        self.continue_file = continue_file
        self.lost: str | None = None  # the error, once the process's device context is gone

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
        report = yield
        if report.when == "call" and self.lost is None:
            error = device_error()
            if error:
                self.lost = error
                if report.passed:
                    report.outcome = "failed"
                    report.longrepr = (f"a kernel this test launched failed on the device after the test returned "
                                       f"(the previous test ended with the device in order): {error}")
        return report

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, Any]:
        result = yield
        if self.lost is None:
            self.lost = device_error()  # a trap in setup or teardown
        if self.lost is not None and self.continue_file is not None and not item.session.shouldstop:
            items = item.session.items
            left = [other.nodeid for other in items[items.index(item) + 1:]]
            if left:  # (pytest started other than by the job's entry: the tests after it go on, and error, as before)
                self.continue_file.write_text(json.dumps({"error": self.lost, "after": item.nodeid, "left": left,
                                                          "failed": item.session.testsfailed}))
                item.session.shouldstop = (f"the device's context was lost in {item.nodeid} ({self.lost}): the "
                                           f"{len(left)} tests after it run in a fresh process")
        return result

    @pytest.hookimpl(trylast=True)  # after the sharding and selection plugins chose the session's tests
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        only = os.environ.get(CONTINUE_ONLY_ENV)
        if not only or config.pluginmanager.has_plugin(RESUMES_TAKING):
            return
        wanted = json.loads(Path(only).read_text())
        order = {nodeid: position for position, nodeid in enumerate(wanted)}
        kept = sorted((item for item in items if item.nodeid in order), key=lambda item: order[item.nodeid])
        dropped = [item for item in items if item.nodeid not in order]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def register(config: pytest.Config) -> None:
    raw = os.environ.get(CONTINUE_FILE_ENV)
    watch = ContextWatch(Path(raw) if raw else None)
    config.pluginmanager.register(watch, "compile-ci-device-context")


def lost(config: pytest.Config) -> str | None:
    """The device error that ended this process's use of its device, if any (the bisection does not start then)."""
    watch = config.pluginmanager.get_plugin("compile-ci-device-context")
    return watch.lost if isinstance(watch, ContextWatch) else None
