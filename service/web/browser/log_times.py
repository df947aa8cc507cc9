"""When each log line was written: read from the worker's `log.times` sidecar (runners/job_log.py) for the lines a
page shows, by binary search, so a page of a 50 MB log costs a few small reads however long the job ran.

An older attempt's directory may hold a `log.times` its job planted (before the name was reserved): every record
is checked (offsets never go back, times are plausible), a bad one ends the usable part, and a line is only ever
given a time or none.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from datetime import UTC, datetime
from pathlib import Path

from runners.job_log import MAX_TIME_RECORDS, TIME_RECORD, TIMES_NAME
from runners.untrusted_files import open_regular

_EARLIEST_MS = 1_577_836_800_000  # 2020-01-01: older is not a time this service wrote
_LATEST_MS = 4_102_444_800_000  # 2100-01-01
_READ_RECORDS = 4096  # per read while collecting a page's records


def _record(fd: int, index: int) -> tuple[int, int]:
    data = os.pread(fd, TIME_RECORD.size, index * TIME_RECORD.size)
    if len(data) < TIME_RECORD.size:
        return (-1, -1)
    offset, at = TIME_RECORD.unpack(data)
    return int(offset), int(at)


def _plausible(at: int) -> bool:
    return _EARLIEST_MS <= at <= _LATEST_MS


def times_at(directory: Path, offsets: list[int]) -> list[int | None]:
    """The time (Unix ms) of the write that held each byte offset (ascending offsets), None where unknown."""
    if not offsets:
        return []
    try:
        with open_regular(directory, TIMES_NAME) as (fd, size):
            count = min(size // TIME_RECORD.size, MAX_TIME_RECORDS)
            records = _covering(fd, count, offsets[0], offsets[-1])
    except OSError:
        return [None] * len(offsets)
    starts = [offset for offset, _at in records]
    found: list[int | None] = []
    for offset in offsets:
        at = bisect_right(starts, offset) - 1
        found.append(records[at][1] if at >= 0 else None)
    return found


def _covering(fd: int, count: int, first: int, last: int) -> list[tuple[int, int]]:
    """The records from the last one at or before `first` up to `last`, while they stay ordered and plausible."""
    low, high = 0, count  # the first record with an offset past `first`
    while low < high:
        middle = (low + high) // 2
        if _record(fd, middle)[0] <= first:
            low = middle + 1
        else:
            high = middle
    index = max(0, low - 1)
    records: list[tuple[int, int]] = []
    while index < count:
        data = os.pread(fd, TIME_RECORD.size * min(_READ_RECORDS, count - index), index * TIME_RECORD.size)
        if not data:
            break
        for offset, at in TIME_RECORD.iter_unpack(data[:len(data) - len(data) % TIME_RECORD.size]):
            if offset > last or not _plausible(at) or (records and offset < records[-1][0]):
                return records
            records.append((offset, at))
        index += len(data) // TIME_RECORD.size
    return records


def last_time(directory: Path) -> int | None:
    """The time of the log's last write (where a running or finished job's log stands)."""
    try:
        with open_regular(directory, TIMES_NAME) as (fd, size):
            count = min(size // TIME_RECORD.size, MAX_TIME_RECORDS)
            at = _record(fd, count - 1)[1] if count else -1
    except OSError:
        return None
    return at if _plausible(at) else None


def clock(at: int) -> str:
    """HH:MM:SS in UTC, as the viewer's time column shows it."""
    return datetime.fromtimestamp(at / 1000, UTC).strftime("%H:%M:%S")


def iso(at: int) -> str:
    return datetime.fromtimestamp(at / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def duration(seconds: float) -> str:
    """A section's length as the viewer's headers say it: 0.4 s, 12 s, 3 m 05 s, 1 h 02 m."""
    if seconds < 10:
        return f"{max(seconds, 0):.1f} s"
    whole = int(round(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} m {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} m"
