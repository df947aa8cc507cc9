"""The runner's half of a shard that takes its tests while it runs (suites/claiming.py): the job asks for a unit by a
line it prints, the worker answers with a file in a directory the job can only read.

Trust boundary: the request is the job's output, read as data. Only a whole line of exactly the request's form
counts; requests are answered in order, once each (one file per request the job really needed, however many lines
it prints), and its numbers are bounded before anything is asked of the grant function (the service's counter of
the job's attempt: service/jobs/grants.py), so a job can only take units of its own attempt, which is what it
could do by running them.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

log = logging.getLogger(__name__)
REQUEST = re.compile(rb"compile-ci-claim (\d{1,7}) (\d{1,7})\r?")  # suites/shard_plan.py's CLAIM_MARKER
MAX_LINE = 40  # longer than any request: a line past it is not read further
MAX_UNITS = 200_000  # no job has more tests (service/planning/selection.py's MAX_TESTS)
UNANSWERED = "unanswered"  # what the job reads when the worker could not ask (suites/claiming.py says so)


@dataclass(frozen=True)
class GrantChannel:
    """A shard's channel: `directory`, the worker's (a container mounts it read-only), and `grant(request, units)`:
    the index of the unit the request is given, or -1 when none is left; it raises when it cannot tell."""

    directory: Path
    grant: Callable[[int, int], int]


class Sink(Protocol):
    def write(self, chunk: bytes) -> None: ...


class GrantTap:
    """Passes everything the job prints to `sink` (its log), and answers the requests among it."""

    def __init__(self, sink: Sink, channel: GrantChannel) -> None:
        self.sink, self.channel = sink, channel
        self.line: bytearray | None = bytearray()  # the current line, while it could still be a request
        self.answered = 0  # the next request's number

    def write(self, chunk: bytes) -> None:
        self.sink.write(chunk)
        parts = chunk.split(b"\n")
        for ended, part in enumerate(parts, start=1 - len(parts)):
            if self.line is not None:
                self.line += part[:MAX_LINE + 1]
                if len(self.line) > MAX_LINE:
                    self.line = None
            if ended:  # every part but the last ends at a newline
                if self.line is not None:
                    self._request(bytes(self.line))
                self.line = bytearray()

    def _request(self, line: bytes) -> None:
        found = REQUEST.fullmatch(line)
        if found is None:
            return
        request, units = int(found[1]), int(found[2])
        if request != self.answered or not 0 < units <= MAX_UNITS:
            return  # out of order, answered already, or no count a job has
        self.answered += 1
        try:
            answer = str(self.channel.grant(request, units))
        except Exception as exc:  # noqa: BLE001 - the job is told, and ends with the reason, not a wait
            log.warning("request %d for a unit of tests not answered: %s", request, exc)
            answer = f"{UNANSWERED}: {type(exc).__name__}: {exc}"[:500]
        temporary = self.channel.directory / f".{request}.partial"
        temporary.write_text(answer)
        os.replace(temporary, self.channel.directory / str(request))


def tapped(sink: Sink, channel: GrantChannel | None) -> Sink:
    """What a runner's log pump writes to: the log itself, or through a GrantTap when the job takes its tests."""
    return sink if channel is None else GrantTap(sink, channel)
