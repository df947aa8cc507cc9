"""A job's log as the worker writes it: everything the job printed, up to a cap, then one line saying so.

The job decides how much it prints; the log lands on the worker's disk and on pages, so it is bounded like any
other output of the job (the container engine's own copy is bounded by the container's log options)."""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import BinaryIO


class LogSink:
    """Appends to log.txt (the worker's own file, in the results directory) until `limit` bytes."""

    def __init__(self, path: Path, limit: int) -> None:
        self.path, self.limit = path, limit
        self.handle: BinaryIO | None = None
        self.written = 0
        self.cut = False

    def __enter__(self) -> LogSink:
        self.handle = open(self.path, "ab")  # noqa: SIM115 - closed in __exit__
        self.written = self.handle.tell()
        return self

    def write(self, chunk: bytes) -> None:
        if self.cut or self.handle is None or self.handle.closed:  # a straggler after the job's end: dropped
            return
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
