"""Reading job logs without loading them whole: a per-file line index, pages of lines, the tail, live chunks.

A log can be tens of megabytes. The index counts newlines per 1 MiB block once (and only the new blocks when a
running job's log grows), so the page holding line N or the last lines of the log cost one seek and one read.
"""

from __future__ import annotations

import os
import threading
from bisect import bisect_right
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from markupsafe import Markup

from runners.untrusted_files import open_file
from service.web.browser.ansi import AnsiState, line_to_html

BLOCK = 1 << 20
LINES_PER_PAGE = 1000
MAX_LINE_CHARS = 4000  # longer lines are cut in pages; the raw file has them whole
MAX_PAGE_BYTES = 4 << 20
INDEX_CACHE_SIZE = 64


@dataclass
class LineIndex:
    """newlines_before[i] = newlines in bytes [0, i * BLOCK); `size` bytes are indexed."""

    inode: int
    size: int
    newlines_before: list[int]
    newlines_in_last: int  # in the partial block [len(newlines_before)-1) * BLOCK, size)

    @property
    def newlines(self) -> int:
        return self.newlines_before[-1] + self.newlines_in_last


_cache: OrderedDict[str, LineIndex] = OrderedDict()
_cache_lock = threading.Lock()


def line_index(path: Path) -> LineIndex:
    with open_file(path.parent, path.name) as handle:  # the job's file in older attempts: never a link or FIFO
        stat = os.fstat(handle.fileno())
    key = str(path)
    with _cache_lock:
        known = _cache.get(key)
    if known is None or known.inode != stat.st_ino or known.size > stat.st_size:
        known = LineIndex(stat.st_ino, 0, [0], 0)
    if known.size < stat.st_size:
        known = _extend(path, known, stat.st_size)
    with _cache_lock:
        _cache[key] = known
        _cache.move_to_end(key)
        while len(_cache) > INDEX_CACHE_SIZE:
            _cache.popitem(last=False)
    return known


def _extend(path: Path, index: LineIndex, size: int) -> LineIndex:
    before = list(index.newlines_before)
    start = (len(before) - 1) * BLOCK  # re-count the partial last block, then whole new blocks
    last = 0
    with open_file(path.parent, path.name) as handle:
        handle.seek(start)
        while start < size:
            chunk = handle.read(min(BLOCK, size - start))
            if not chunk:
                break
            start += len(chunk)
            if len(chunk) == BLOCK:
                before.append(before[-1] + chunk.count(b"\n"))
                last = 0
            else:
                last = chunk.count(b"\n")
                break
    return LineIndex(index.inode, start, before, last)


def total_lines(path: Path) -> int:
    index = line_index(path)
    if index.size == 0:
        return 0
    with open_file(path.parent, path.name) as handle:
        handle.seek(index.size - 1)
        ends_with_newline = handle.read(1) == b"\n"
    return index.newlines + (0 if ends_with_newline else 1)


def offset_of_line(path: Path, line: int) -> int:
    """Byte offset where 0-based `line` starts (the file size when past the end)."""
    index = line_index(path)
    if line <= 0:
        return 0
    if line > index.newlines:
        return index.size
    block = bisect_right(index.newlines_before, line - 1) - 1  # the block holding the line-th newline
    with open_file(path.parent, path.name) as handle:
        handle.seek(block * BLOCK)
        chunk = handle.read(BLOCK)
    position, remaining = -1, line - index.newlines_before[block]
    for _ in range(remaining):
        position = chunk.find(b"\n", position + 1)
    return block * BLOCK + position + 1


def lines_before(path: Path, offset: int) -> int:
    index = line_index(path)
    block = min(offset // BLOCK, len(index.newlines_before) - 1)
    with open_file(path.parent, path.name) as handle:
        handle.seek(block * BLOCK)
        counted = handle.read(offset - block * BLOCK).count(b"\n")
    return index.newlines_before[block] + counted


@dataclass(frozen=True)
class LogLine:
    number: int  # 1-based, the anchor L<number>
    html: Markup
    cut: bool


def render(lines: list[bytes], first_number: int) -> list[LogLine]:
    state = AnsiState()
    out = []
    for offset, raw in enumerate(lines):
        text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        cut = len(text) > MAX_LINE_CHARS
        out.append(LogLine(first_number + offset, line_to_html(text[:MAX_LINE_CHARS], state), cut))
    return out


def page(path: Path, number: int) -> list[LogLine]:
    """Lines of 1-based page `number` (LINES_PER_PAGE per page)."""
    first = (number - 1) * LINES_PER_PAGE
    start = offset_of_line(path, first)
    with open_file(path.parent, path.name) as handle:
        handle.seek(start)
        data = handle.read(MAX_PAGE_BYTES)
    lines = data.splitlines(keepends=True)[:LINES_PER_PAGE]
    return render(lines, first + 1)


def page_count(path: Path) -> int:
    return max(1, -(-total_lines(path) // LINES_PER_PAGE))


def tail(path: Path, max_bytes: int) -> tuple[list[LogLine], int, bool]:
    """The last complete lines within `max_bytes`, the offset the live view continues from, and whether
    the lines shown start after the beginning of the log."""
    size = line_index(path).size
    start = max(0, size - max_bytes)
    with open_file(path.parent, path.name) as handle:
        handle.seek(start)
        data = handle.read(size - start)
    if start > 0:  # drop the partial first line
        cut = data.find(b"\n") + 1
        data, start = data[cut:], start + cut
    return render(data.splitlines(keepends=True), lines_before(path, start) + 1), size, start > 0


def chunk_from(path: Path, offset: int, max_bytes: int, final: bool) -> tuple[list[LogLine], int]:
    """Complete lines written at or after `offset` (a partial last line too once the job finished)."""
    size = line_index(path).size
    offset = min(max(0, offset), size)
    with open_file(path.parent, path.name) as handle:
        handle.seek(offset)
        data = handle.read(min(max_bytes, size - offset))
    if not (final and offset + len(data) == size):
        data = data[: data.rfind(b"\n") + 1]
    return render(data.splitlines(keepends=True), lines_before(path, offset) + 1), offset + len(data)
