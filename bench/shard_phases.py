"""Where a shard's overhead goes: its log's times (the `log.times` sidecar the worker writes beside log.txt, at most
100 ms early) at the markers every job prints, against the shard's start and end in the store.

The phases of a shard, each in seconds:
- `to_command`: the worker's start of the shard (lease, checkout, plan) to the command line it writes to the log;
- `to_session`: that line to pytest's session start ("::group::Collect tests"): the runner's start, the interpreter or
  the fork from the warm one, the install step, the imports and the plugin's configure;
- `collection`: to "::group::Run tests" (the test modules' imports: a model repository's models);
- `tests`: to "::group::Results" (every test, and the requests for units between them);
- `session_end`: to the log's last write (JUnit, the summary, the plugin's files, the process's exit as far as the
  log shows it);
- `to_done`: the log's last write to the shard's end in the store (the process's exit, the output read and judged).
"""

from __future__ import annotations

import datetime
from pathlib import Path

from runners.job_log import TIME_RECORD, TIMES_NAME

MARKERS = (("session", b"::group::Collect tests"), ("collected", b"::group::Run tests"),
           ("tests_done", b"::group::Results"))


def _records(directory: Path) -> list[tuple[int, float]]:
    try:
        data = (directory / TIMES_NAME).read_bytes()
    except OSError:
        return []
    usable = len(data) - len(data) % TIME_RECORD.size
    return [(offset, ms / 1000.0) for offset, ms in TIME_RECORD.iter_unpack(data[:usable])]


def _time_at(records: list[tuple[int, float]], offset: int) -> float | None:
    found = None
    for at_offset, seconds in records:
        if at_offset > offset:
            break
        found = seconds
    return found


def shard_phases(directory: Path, started: datetime.datetime | None,
                 finished: datetime.datetime | None) -> dict[str, float]:
    """The phases above for the shard whose merged directory is `directory` (`<attempt>/shards/<index>`); a phase
    whose marker is missing is left out."""
    records = _records(directory)
    try:
        log = (directory / "log.txt").read_bytes()
    except OSError:
        return {}
    if not records or started is None or finished is None:
        return {}
    points: dict[str, float] = {"command": records[0][1]}
    for name, marker in MARKERS:
        offset = log.find(marker)
        at = _time_at(records, offset) if offset >= 0 else None
        if at is not None:
            points[name] = at
    points["last_write"] = records[-1][1]
    order = [("to_command", "start", "command"), ("to_session", "command", "session"),
             ("collection", "session", "collected"), ("tests", "collected", "tests_done"),
             ("session_end", "tests_done", "last_write"), ("to_done", "last_write", "end")]
    points["start"], points["end"] = started.timestamp(), finished.timestamp()
    return {name: round(points[b] - points[a], 2) for name, a, b in order if a in points and b in points}
