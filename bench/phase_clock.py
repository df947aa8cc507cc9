"""A pytest plugin for bench/job_startup.py (`-p phase_clock`, from the job's checkout): prints when each phase of a
job's pytest session happened, as epoch seconds on the job's log, beside the wrapper's start and exit stamps."""

from __future__ import annotations

import time
from collections.abc import Generator

import pytest

_seen = {"tests": 0}


def _stamp(what: str) -> None:
    print(f"\n[phase] {what} {time.time():.3f}", flush=True)


def pytest_configure(config: pytest.Config) -> None:
    _stamp("configured")


def pytest_collection_finish(session: pytest.Session) -> None:
    _stamp(f"collected {len(session.items)}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    if _seen["tests"] == 0:
        _stamp("first test starts")
    yield
    _seen["tests"] += 1
    if _seen["tests"] == 1:
        _stamp("first test ends")


def pytest_sessionfinish(session: pytest.Session) -> None:
    _stamp("tests end")


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    _stamp("pytest done")
