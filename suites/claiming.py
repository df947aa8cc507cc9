"""A shard that takes its tests while it runs (a job without recorded test times: a repository's first push).

Every shard of the job collects the same tests and cuts them into the same units (suites/sharding.py: the tests of
one model together, the heaviest first). Instead of a share fixed before it starts, a shard asks the worker for
the next unit whenever it is about to need one, and runs what it is given: a slot that started late, or whose
units were light, takes more; no slot waits while another still has a queue. The worker answers from one counter
per job attempt (service/jobs/grants.py), so no unit is given twice, and a shard's retried attempt is given again,
in order, the units its earlier attempt was given.

The channel holds no network and nothing shared between jobs: the request is a line the shard prints
(``compile-ci-claim <request> <units>``, read by the worker from the job's output stream: runners/grants.py), the
answer a file the worker writes into a directory the job can only read.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .shard_plan import CLAIM_MARKER, NO_UNIT_LEFT

WAIT_S = 120.0  # a worker answers within milliseconds; this long without an answer is a lost worker


class NoAnswer(RuntimeError):
    pass


class Claiming:
    def __init__(self, config: pytest.Config, grants: Path, units: list[list[pytest.Item]],
                 first: list[pytest.Item] | None = None, asked: int = 0) -> None:
        """`first`, `asked`: a continuation's (its earlier process lost its device): the tests that process had taken
        and left, run before any other, and how many requests it made (the next is numbered after them)."""
        self.config, self.grants, self.units = config, grants, units
        self.first, self.asked = first or [], asked

    def take(self) -> int:
        """The index of the next unit this shard runs, or NO_UNIT_LEFT."""
        seq = self.asked
        self.asked += 1
        capture = self.config.pluginmanager.getplugin("capturemanager")
        line = f"\n{CLAIM_MARKER} {seq} {len(self.units)}\n"
        if capture is not None:
            with capture.global_and_fixture_disabled():
                _say(line)
        else:
            _say(line)
        answer = self.grants / str(seq)
        deadline, pause = time.monotonic() + WAIT_S, 0.002
        while True:
            try:
                text = answer.read_text()
            except FileNotFoundError:
                if time.monotonic() > deadline:
                    raise NoAnswer(f"the worker did not answer request {seq} for a unit of tests in "
                                   f"{WAIT_S:.0f} s") from None
                time.sleep(pause)
                pause = min(pause * 2, 0.05)
                continue
            try:
                unit = int(text.strip())
            except ValueError:
                raise NoAnswer(f"request {seq} for a unit of tests: {text[:500]}") from None
            if unit != NO_UNIT_LEFT and not 0 <= unit < len(self.units):
                raise NoAnswer(f"the worker answered request {seq} with unit {unit} of {len(self.units)}")
            return unit

    def _taken(self, session: pytest.Session) -> Iterator[pytest.Item]:
        session.items.extend(self.first)
        yield from self.first
        while (unit := self.take()) != NO_UNIT_LEFT:
            # The session's tests, as the device context (what a lost context leaves to a continuation), bisection
            # and the progress read them: every test of a unit this shard was given, from when it is given.
            session.items.extend(self.units[unit])
            yield from self.units[unit]

    def pytest_runtestloop(self, session: pytest.Session) -> bool:
        """pytest's own loop (src/_pytest/main.py) over the tests as they are taken: each test runs knowing the next
        one (its fixtures' teardown depends on it), so a unit is asked for just before the last test of the one
        before it runs."""
        if session.testsfailed and not session.config.option.continue_on_collection_errors:
            raise session.Interrupted(f"{session.testsfailed} error{'s' if session.testsfailed != 1 else ''} "
                                      "during collection")
        if session.config.option.collectonly:
            return True
        taken = self._taken(session)
        item = next(taken, None)
        while item is not None:
            following = next(taken, None)
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=following)
            if session.shouldfail:
                raise session.Failed(session.shouldfail)
            if session.shouldstop:
                raise session.Interrupted(session.shouldstop)
            item = following
        session.testscollected = len(session.items)
        return True


def _say(line: str) -> None:
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), line.encode())  # one write: the line reaches the worker whole
