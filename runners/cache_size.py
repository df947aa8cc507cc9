"""A compile cache's size: bytes in its files, and the cap kept by evicting the least recently used."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path


def _files(directory: Path) -> Iterator[tuple[str, os.stat_result]]:
    """Every file under `directory` with its lstat (links not followed); one removed meanwhile is skipped."""
    for dirpath, _dirs, files in os.walk(directory):
        for name in files:
            path = os.path.join(dirpath, name)
            try:
                yield path, os.lstat(path)
            except FileNotFoundError:
                continue


def evict_lru(directory: Path, cap_bytes: int) -> int:
    """Remove the least recently used files (by access or modification time, whichever is later) until the
    directory holds at most cap_bytes. With `noatime` mounts this degrades to least recently written."""
    entries = [(max(info.st_atime, info.st_mtime), info.st_size, path) for path, info in _files(directory)]
    total = sum(size for _used, size, _path in entries)
    freed = 0
    for _used, size, path in sorted(entries):
        if total - freed <= cap_bytes:
            break
        try:
            os.unlink(path)
            freed += size
        except FileNotFoundError:
            pass
    if freed:
        _remove_empty_dirs(directory)
    return freed


def disk_usage(directory: Path) -> int:
    """Bytes in the files under a directory (what the cap counts)."""
    return sum(info.st_size for _path, info in _files(directory))


def _remove_empty_dirs(directory: Path) -> None:
    for dirpath, _dirs, _files in os.walk(directory, topdown=False):
        if dirpath != str(directory):
            try:
                os.rmdir(dirpath)
            except OSError:
                pass  # not empty
