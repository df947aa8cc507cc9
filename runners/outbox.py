"""A job's output directory crosses a trust boundary: what the job left is copied into a directory it never had,
regular files only, bounded in size, count, depth and name; everything else becomes a named problem.

Two sources, one writer: a directory on this host (LocalRunner, walked without following links) and the tar stream
the Docker engine archives from the job's output volume (DockerRunner). The destination is the worker's own fresh
directory, so nothing the job planted (a link, a FIFO, a name like `../meta.json`) can point the worker elsewhere.
"""

from __future__ import annotations

import io
import os
import re
import stat
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runners.untrusted_files import CHUNK, UntrustedFileError, kind_of, open_dir

# The worker's own files in the results directory: a job's file of the same name is refused, never merged.
RESERVED = frozenset({"log.txt", "log.times", "meta.json", "wheels.json"})
MAX_PROBLEMS = 50  # listed on the job page; the count says how many more there were
# The one file copied out while the job runs (for its live progress), every few seconds.
PROGRESS_FILE = "progress.json"
PROGRESS_LIMIT = 64 * 1024
PROGRESS_EVERY_S = 3.0
_BAD_NAME = re.compile(r"[\x00-\x1f\x7f]")
# A relative path longer than this is refused, never attempted: the same outcome on every worker, and room for the
# worker's own directory below PATH_MAX (4096).
PATH_BYTES = 3072


@dataclass(frozen=True)
class Limits:
    total_bytes: int = 1024 * 1024 * 1024  # the job's output quota (COMPILE_CI_OUTPUT_MB)
    files: int = 100_000  # entries of any kind
    depth: int = 16
    name_bytes: int = 255


@dataclass
class OutputReport:
    """What the copy kept and refused; `over_quota` when the job filled its output space."""

    files: int = 0
    bytes: int = 0
    problems: list[tuple[str, str]] = field(default_factory=list)  # (name as shown, what it was)
    problem_count: int = 0
    over_quota: bool = False

    def refuse(self, relative: str, reason: str) -> None:
        self.problem_count += 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append((shown_name(relative), reason))


def shown_name(relative: str) -> str:
    """A job-chosen name as pages and logs may show it: bytes that are not UTF-8 and control characters escaped,
    length capped."""
    text = relative.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    text = _BAD_NAME.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
    return text if len(text) <= 200 else text[:200] + "…"


class _Writer:
    """Creates files and folders under the worker's destination, never over a reserved name, within the limits."""

    def __init__(self, dest: Path, limits: Limits, report: OutputReport) -> None:
        self.dest, self.limits, self.report = dest, limits, report
        self.entries = 0
        dest.mkdir(parents=True, exist_ok=True)

    def admit(self, relative: str, is_dir: bool) -> bool:
        """Whether an entry's name may be copied; refusals are reported."""
        self.entries += 1
        parts = relative.split("/")
        if self.entries > self.limits.files:
            self.report.over_quota = True
            self.report.refuse(relative, f"more than {self.limits.files} entries")
            return False
        if len(parts) > self.limits.depth:
            self.report.refuse(relative, f"nested deeper than {self.limits.depth} folders")
            return False
        if any(not _plain(p, self.limits.name_bytes) for p in parts):
            self.report.refuse(relative, "a name that is not a plain file name")
            return False
        if len(relative.encode()) > PATH_BYTES:
            self.report.refuse(relative, f"a path longer than {PATH_BYTES} bytes")
            return False
        if not is_dir and len(parts) == 1 and parts[0] in RESERVED:
            self.report.refuse(relative, "a name the service writes itself")
            return False
        return True

    def folder(self, relative: str) -> bool:
        try:
            (self.dest / relative).mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # what the job named cannot be made here: its problem, never the worker's
            self.report.refuse(relative, f"could not be copied ({exc.strerror})")
            return False
        return True

    def file(self, relative: str, chunks: Iterable[bytes], size: int) -> None:
        if self.report.bytes + size > self.limits.total_bytes:
            self.report.over_quota = True
            self.report.refuse(relative, "past the output quota")
            return
        target = self.dest / relative
        if not self.folder(str(Path(relative).parent)):
            return
        # The destination is ours alone (the job never had it): what stands there is the runner's own live copy
        # (progress.json), replaced; O_EXCL|O_NOFOLLOW would still refuse anything else.
        if target.is_file() and not target.is_symlink():
            target.unlink()
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as exc:  # e.g. a folder of the same name came first
            self.report.refuse(relative, f"could not be copied ({exc.strerror})")
            return
        written = 0
        try:
            with os.fdopen(fd, "wb") as handle:
                for chunk in chunks:
                    chunk = chunk[:size - written]  # a file that grew while it was read: keep what it announced
                    handle.write(chunk)
                    written += len(chunk)
                    if written >= size:
                        break
        except BaseException:
            target.unlink(missing_ok=True)
            raise
        self.report.files += 1
        self.report.bytes += written


def _plain(part: str, limit: int) -> bool:
    """A name the worker can copy and every page can show: not empty or a dot name, no control characters, UTF-8
    (a job may write any bytes; `os` hands undecodable ones back as surrogates), at most `limit` bytes."""
    if part in ("", ".", "..") or _BAD_NAME.search(part):
        return False
    try:
        return len(part.encode("utf-8")) <= limit
    except UnicodeEncodeError:
        return False


def publish_progress(dest: Path, data: bytes) -> None:
    """The job's latest progress.json (at most PROGRESS_LIMIT bytes, read as data) into the results directory."""
    temporary = dest / f".{PROGRESS_FILE}.live"
    temporary.write_bytes(data[:PROGRESS_LIMIT])
    os.replace(temporary, dest / PROGRESS_FILE)


def collect_tree(source: Path, dest: Path, limits: Limits) -> OutputReport:
    """Copy a job's directory on this host (its processes all gone) into `dest`."""
    report = OutputReport()
    writer = _Writer(dest, limits, report)
    if source.is_dir() and not source.is_symlink():
        with open_dir(source) as fd:
            _walk(fd, "", writer)
    return report


def _walk(fd: int, prefix: str, writer: _Writer) -> None:
    for entry in sorted(os.scandir(fd), key=lambda e: e.name):
        relative = prefix + entry.name
        mode = entry.stat(follow_symlinks=False).st_mode
        if not writer.admit(relative, stat.S_ISDIR(mode)):
            continue
        if stat.S_ISDIR(mode):
            if not writer.folder(relative):
                continue
            try:
                child = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError as exc:
                writer.report.refuse(relative, f"unreadable ({exc.strerror})")
                continue
            try:
                _walk(child, relative + "/", writer)
            finally:
                os.close(child)
        elif stat.S_ISREG(mode):
            _copy_regular(fd, entry.name, relative, writer)
        else:
            writer.report.refuse(relative, f"{kind_of(mode)} (not read)")


def _copy_regular(parent: int, name: str, relative: str, writer: _Writer) -> None:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent)
    except OSError as exc:
        writer.report.refuse(relative, f"unreadable ({exc.strerror})")
        return
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):  # swapped between the listing and the open
            writer.report.refuse(relative, f"{kind_of(info.st_mode)} (not read)")
            return
        writer.file(relative, _chunks(fd), info.st_size)
    finally:
        os.close(fd)


def _chunks(fd: int) -> Iterator[bytes]:
    while chunk := os.read(fd, CHUNK):
        yield chunk


def collect_tar(stream: Iterable[bytes], dest: Path, limits: Limits, top: str) -> OutputReport:
    """Copy the engine's archive of the job's output directory (`top/` is that directory's own entry) into `dest`.

    Links, FIFOs and devices arrive as tar headers and stay headers. The stream is bounded too: the archive of a
    sparse file can be far longer than the space it took, so reading stops past the quota."""
    report = OutputReport()
    writer = _Writer(dest, limits, report)
    budget = io.BufferedReader(_Budget(stream, limits.total_bytes + 1024 * (limits.files + 16) + 1024 * 1024),
                               CHUNK)
    try:
        with tarfile.open(fileobj=budget, mode="r|") as archive:
            for member in archive:
                relative = _inside(member.name, top)
                if relative is None:
                    continue
                if not writer.admit(relative, member.isdir()):
                    continue
                if member.isdir():
                    writer.folder(relative)  # a refusal is reported; the files under it are refused in turn
                elif member.isreg():
                    source = archive.extractfile(member)
                    assert source is not None
                    writer.file(relative, iter(lambda source=source: source.read(CHUNK), b""), member.size)
                else:
                    writer.report.refuse(relative, f"{_tar_kind(member)} (not read)")
    except _OverBudget:
        report.over_quota = True
        report.refuse(top, "its archive ran past the output quota (sparse files?); the rest was not read")
    except tarfile.TarError as exc:
        report.refuse(top, f"its archive could not be read ({exc})")
    return report


def _inside(name: str, top: str) -> str | None:
    name = name.removeprefix("./")
    if name == top or name == top + "/":
        return None
    return name[len(top) + 1:].rstrip("/") if name.startswith(top + "/") else None


def _tar_kind(member: tarfile.TarInfo) -> str:
    if member.issym():
        return "a symbolic link"
    if member.islnk():
        return "a hard link"
    if member.isfifo():
        return "a FIFO"
    if member.ischr() or member.isblk():
        return "a device"
    return "not a regular file"


class _OverBudget(Exception):
    pass


class _Budget(io.RawIOBase):
    """A file-like view of the engine's chunks that refuses to be read past `limit` bytes."""

    def __init__(self, chunks: Iterable[bytes], limit: int) -> None:
        super().__init__()
        self._chunks, self._chunk, self._at, self._left = iter(chunks), b"", 0, limit

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while self._at >= len(self._chunk):
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._chunk, self._at = chunk, 0
            self._left -= len(chunk)
            if self._left < 0:
                raise _OverBudget
        n = min(len(buffer), len(self._chunk) - self._at)
        buffer[:n] = self._chunk[self._at:self._at + n]
        self._at += n
        return n


__all__ = ["Limits", "OutputReport", "UntrustedFileError", "collect_tar", "collect_tree", "shown_name"]
