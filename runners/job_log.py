"""A job's log as the worker writes it: everything the job printed, up to a cap, then one line saying so; beside
it, when each part arrived (the `log.times` sidecar the log viewer reads for its timestamps).

The job decides how much it prints; the log lands on the worker's disk and on pages, so it is bounded like any
other output of the job (the container engine's own copy is bounded by the container's log options). The times
stay out of log.txt so that the raw log a maintainer downloads is exactly what the job printed.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

TIMES_NAME = "log.times"
# One record per write that starts a new 100 ms: (byte offset in log.txt where the write began, Unix time in ms).
# A line's time is that of the last record at or before its first byte, so it is never late and at most 100 ms
# early; 100,000 records (1.6 MB) cover 2.7 hours of a job printing without pause.
TIME_RECORD = struct.Struct("<QQ")
STAMP_EVERY_MS = 100
MAX_TIME_RECORDS = 100_000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class TimeStamps:
    """Appends (offset, time) records to the sidecar, at most one per STAMP_EVERY_MS and MAX_TIME_RECORDS in all."""

    def __init__(self, log_path: Path) -> None:
        self.handle = open(log_path.with_name(TIMES_NAME), "ab")  # noqa: SIM115 - closed by close()
        self.count = self.handle.tell() // TIME_RECORD.size
        self.last_ms = -STAMP_EVERY_MS

    def stamp(self, offset: int, at_ms: int | None = None) -> None:
        at = now_ms() if at_ms is None else at_ms
        if at - self.last_ms < STAMP_EVERY_MS or self.count >= MAX_TIME_RECORDS or self.handle.closed:
            return
        self.handle.write(TIME_RECORD.pack(offset, at))
        self.handle.flush()
        self.count += 1
        self.last_ms = at

    def close(self) -> None:
        self.handle.close()


def append_text(path: Path, text: str) -> None:
    """A line of the worker's own (the command, an install failure) with its time: not the job's output."""
    with open(path, "ab") as handle:
        offset = handle.tell()
        handle.write(text.encode())
    stamps = TimeStamps(path)
    try:
        stamps.stamp(offset)
    finally:
        stamps.close()


class LogSink:
    """Appends to log.txt (the worker's own file, in the results directory) until `limit` bytes."""

    def __init__(self, path: Path, limit: int) -> None:
        self.path, self.limit = path, limit
        self.handle: BinaryIO | None = None
        self.stamps: TimeStamps | None = None
        self.written = 0
        self.cut = False

    def __enter__(self) -> LogSink:
        self.handle = open(self.path, "ab")  # noqa: SIM115 - closed in __exit__
        self.written = self.handle.tell()
        self.stamps = TimeStamps(self.path)
        return self

    def write(self, chunk: bytes) -> None:
        if self.cut or self.handle is None or self.handle.closed:  # a straggler after the job's end: dropped
            return
        if self.stamps is not None and chunk:
            self.stamps.stamp(self.written)
        room = self.limit - self.written
        if len(chunk) > room:
            self.handle.write(chunk[:max(room, 0)])
            self.handle.write(f"\n[compile-ci: the log was cut at {self.limit // (1024 * 1024)} MB; the job went on "
                              "printing]\n".encode())
            self.cut = True
        else:
            self.handle.write(chunk)
        self.written += len(chunk)
        self.handle.flush()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self.handle is not None:
            self.handle.close()
        if self.stamps is not None:
            self.stamps.close()
