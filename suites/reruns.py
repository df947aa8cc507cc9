"""In-job reruns of failing tests (`COMPILE_CI_RERUNS=N`), so a flaky test is told from a broken one.

A test whose *call* fails runs again, setup, call and teardown, up to N more times, until it passes. Only the last
attempt is reported (JUnit, terminal, progress, artifacts); the outcomes of the earlier ones are the testcase's
`compile_ci_reruns` property (`failed,failed`) and `metrics.json`'s `reruns`. Errors in setup or teardown, skips and
expected failures are not re-run: a broken fixture or a skip does not turn out differently on a second try, and
rerunning it only costs time. pytest's own runner protocol is used (no pytest-rerunfailures dependency).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

import pytest
from _pytest.runner import runtestprotocol

RERUNS_ENV = "COMPILE_CI_RERUNS"
RERUNS_PROPERTY = "compile_ci_reruns"
EARLIER_ATTEMPTS = pytest.StashKey[list[str]]()


def reruns_from(environ: Mapping[str, str]) -> int:
    """N from `COMPILE_CI_RERUNS` (unset or empty: 0); anything but a whole number ≥ 0 is a usage error."""
    raw = environ.get(RERUNS_ENV, "").strip()
    if not raw:
        return 0
    if not re.fullmatch(r"[0-9]{1,4}", raw):
        raise pytest.UsageError(f"{RERUNS_ENV}={raw[:40]!r}: expected a whole number >= 0, how many more times a "
                                "test whose call failed is run before it counts as failed")
    return int(raw)


def earlier_attempts(item: pytest.Item) -> list[str]:
    """The outcomes of this test's attempts before the reported one (empty when it ran once)."""
    return list(item.stash.get(EARLIER_ATTEMPTS, []))


class Reruns:
    def __init__(self, count: int) -> None:
        self.count = count

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool:
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        recorded = list(item.user_properties)
        earlier: list[str] = []
        while True:
            # Each attempt starts from what was recorded before the first; the reported one carries the history.
            item.user_properties = list(recorded)
            if earlier:
                item.stash[EARLIER_ATTEMPTS] = list(earlier)
                item.user_properties.append((RERUNS_PROPERTY, ",".join(earlier)))
            # With the real next item, fixtures wider than the test are torn down and set up again as pytest
            # would between two tests, so every attempt starts as the first did.
            reports = runtestprotocol(item, nextitem=nextitem, log=False)
            call_failed = any(report.when == "call" and report.failed for report in reports)
            if not call_failed or len(earlier) >= self.count:
                break
            earlier.append("failed")
        for report in reports:
            item.ihook.pytest_runtest_logreport(report=report)
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True


def register(config: pytest.Config) -> None:
    count = reruns_from(os.environ)
    if count and not config.pluginmanager.has_plugin("compile-ci-reruns"):
        config.pluginmanager.register(Reruns(count), "compile-ci-reruns")
