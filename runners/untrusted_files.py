"""Reading files a job wrote (or a directory that may hold them) as untrusted data: regular files only, no link
followed in any path component below the trusted root, nothing that can block (FIFOs, devices), bounded reads.

The worker copies a job's output through this (runners/outbox.py) and the web reads artifacts through it, so a
link to the App's private key, a FIFO that never answers or a 60 MB "metrics.json" are named, never followed.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
_DIR_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC
CHUNK = 1024 * 1024


class UntrustedFileError(OSError):
    """A path a job controls that is not a plain file we may read: `reason` says what it is."""

    def __init__(self, relative: str, reason: str) -> None:
        super().__init__(f"{relative}: {reason}")
        self.relative, self.reason = relative, reason


def kind_of(mode: int) -> str:
    """What a non-regular entry is, in a maintainer's words."""
    for test, words in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                        (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                        (stat.S_ISDIR, "a directory")):
        if test(mode):
            return words
    return "not a regular file"


def parts_of(relative: str) -> list[str]:
    parts = [part for part in relative.split("/") if part not in ("", ".")]
    if not parts or ".." in parts or any("\0" in part for part in parts):
        raise UntrustedFileError(relative, "not a path inside the directory")
    return parts


@contextmanager
def open_dir(root: Path, relative: str = "") -> Iterator[int]:
    """A directory fd of root/relative, walked one component at a time without following a link."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in parts_of(relative) if relative else []:
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise _refusal(fd, part, relative, exc) from None
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _open_fd(root: Path, relative: str) -> tuple[int, int]:
    *folders, name = parts_of(relative)
    with open_dir(root, "/".join(folders)) as parent:
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=parent)
        except OSError as exc:
            raise _refusal(parent, name, relative, exc) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):  # O_NONBLOCK: a FIFO opened without blocking, refused here
        os.close(fd)
        raise UntrustedFileError(relative, kind_of(info.st_mode))
    return fd, info.st_size


@contextmanager
def open_regular(root: Path, relative: str) -> Iterator[tuple[int, int]]:
    """(fd, size) of the regular file root/relative: no link anywhere below root, never a FIFO or device."""
    fd, size = _open_fd(root, relative)
    try:
        yield fd, size
    finally:
        os.close(fd)


def open_file(root: Path, relative: str) -> BinaryIO:
    """The regular file root/relative as a binary file object (the caller closes it)."""
    fd, _size = _open_fd(root, relative)
    return os.fdopen(fd, "rb")


def file_size_or_raise(root: Path, relative: str) -> int:
    with open_regular(root, relative) as (_fd, size):
        return size


def file_size(root: Path, relative: str) -> int | None:
    """The size of a regular file there, None for anything else (missing, a link, a FIFO)."""
    try:
        with open_regular(root, relative) as (_fd, size):
            return size
    except OSError:
        return None


def read_bounded(root: Path, relative: str, limit: int) -> bytes:
    """The whole file, or UntrustedFileError when it is over `limit` bytes (a size it announced or really has)."""
    with open_regular(root, relative) as (fd, size):
        if size > limit:
            raise UntrustedFileError(relative, f"{size} bytes, over the {limit}-byte limit")
        data = _read_upto(fd, limit + 1)
    if len(data) > limit:
        raise UntrustedFileError(relative, f"over the {limit}-byte limit")
    return data


def read_head(root: Path, relative: str, limit: int, offset: int = 0) -> tuple[bytes, int]:
    """Up to `limit` bytes from `offset` and the file's size: for pages that show part of a big file."""
    with open_regular(root, relative) as (fd, size):
        if offset:
            os.lseek(fd, min(offset, size), os.SEEK_SET)
        return _read_upto(fd, limit), size


def iter_chunks(root: Path, relative: str) -> Iterator[bytes]:
    """A download: the file in chunks (the fd stays open only while it streams)."""
    with open_regular(root, relative) as (fd, _size):
        while chunk := os.read(fd, CHUNK):
            yield chunk


# A number a job wrote is a measurement (seconds, counts, sizes): beyond this it is refused, so no reader overflows
# formatting or comparing it (10**400 is a valid JSON integer; float() of it raises).
MAX_NUMBER = 10**15


def read_json_data(root: Path, relative: str, limit: int) -> Any:
    """A JSON document a job wrote, read bounded and without following links, as plain data: NaN and infinities
    refused (ValueError), numbers past MAX_NUMBER read as null, NUL characters (which PostgreSQL's text refuses)
    replaced. Raises OSError (UntrustedFileError), ValueError or RecursionError like json.loads."""
    return _clean(json.loads(read_bounded(root, relative, limit), parse_constant=_refuse_constant,
                             parse_int=_bounded_int, parse_float=_bounded_float))


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number")


def _bounded_int(text: str) -> int | None:
    return int(text) if len(text.lstrip("-")) <= 16 and abs(int(text)) <= MAX_NUMBER else None


def _bounded_float(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) and abs(value) <= MAX_NUMBER else None


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, list):
        return [_clean(item) for item in value]
    if isinstance(value, dict):
        return {_clean(key): _clean(item) for key, item in value.items()}
    return value


def is_regular(root: Path, relative: str) -> bool:
    try:
        with open_regular(root, relative):
            return True
    except OSError:
        return False


def is_folder(root: Path, relative: str) -> bool:
    """Whether root/relative is a directory reached without a link in any component below root."""
    try:
        with open_dir(root, relative):
            return True
    except OSError:
        return False


def _read_upto(fd: int, limit: int) -> bytes:
    parts, left = [], limit
    while left > 0:
        chunk = os.read(fd, min(CHUNK, left))
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def _refusal(parent: int, name: str, relative: str, exc: OSError) -> OSError:
    """ELOOP/ENOTDIR from O_NOFOLLOW mean a link or a non-directory stood there: say which."""
    try:
        mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
    except OSError:
        return exc
    if stat.S_ISLNK(mode) or not stat.S_ISDIR(mode) and not stat.S_ISREG(mode):
        return UntrustedFileError(relative, kind_of(mode))
    return exc


def usage(source: Path, stop_at: int) -> int:
    """Bytes (rounded to pages) and entries under a job's directory on this host, counted without following links;
    stops early once past `stop_at` (LocalRunner's quota check, every few seconds while the job runs)."""
    total = 0
    stack = [source]
    while stack and total <= stop_at:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            total += 4096 + (info.st_blocks * 512 if stat.S_ISREG(info.st_mode) else 0)
            if stat.S_ISDIR(info.st_mode):
                stack.append(Path(entry.path))
    return total
