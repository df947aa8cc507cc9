"""Reading job logs without loading them whole: a per-file line index, pages of lines, the tail, live chunks.

A log can be tens of megabytes. The index counts newlines per 1 MiB block once (and only the new blocks when a
running job's log grows), so the page holding line N or the last lines of the log cost one seek and one read.
The same pass notes the section markers (`::group::<title>`, `::endgroup::`, as GitHub Actions prints them), so a
page knows which section it starts in and how long each section took. Each line carries its time from the
worker's sidecar (log_times.py).
"""

from __future__ import annotations

import os
import re
import threading
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from markupsafe import Markup

from runners.untrusted_files import open_file
from service.web.browser import log_times
from service.web.browser.ansi import AnsiState, line_to_html

BLOCK = 1 << 20
LINES_PER_PAGE = 1000
MAX_LINE_CHARS = 4000  # longer lines are cut in pages; the raw file has them whole
MAX_PAGE_BYTES = 4 << 20
INDEX_CACHE_SIZE = 64
GROUP, END_GROUP = b"::group::", b"::endgroup::"
MAX_MARKS = 1000  # a log printing more markers than this is not folded past them (the job chooses what it prints)
MAX_TITLE_CHARS = 200
_UNPRINTABLE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class Mark:
    """A section marker line: 0-based line number, byte offset, and the title (None: the end of a section)."""

    line: int
    offset: int
    title: str | None


@dataclass
class LineIndex:
    """newlines_before[i] = newlines in bytes [0, i * BLOCK); `size` bytes are indexed."""

    inode: int
    size: int
    newlines_before: list[int]
    newlines_in_last: int  # in the partial block [len(newlines_before)-1) * BLOCK, size)
    marks: tuple[Mark, ...] = ()

    def open_at(self, line: int) -> Mark | None:
        """The section marker in force at 0-based `line` (the last before it), if any."""
        before = [mark for mark in self.marks if mark.line < line]
        return before[-1] if before else None

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
        known = LineIndex(stat.st_ino, 0, [0], 0, ())
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
    marks = [mark for mark in index.marks if mark.offset < start]
    last = 0
    with open_file(path.parent, path.name) as handle:
        previous = os.pread(handle.fileno(), 1, start - 1) if start else b"\n"
        handle.seek(start)
        while start < size:
            chunk = handle.read(min(BLOCK, size - start))
            if not chunk:
                break
            if len(marks) < MAX_MARKS:  # with a glimpse past the block: a marker's "::" may straddle its end
                ahead = os.pread(handle.fileno(), len(GROUP), start + len(chunk))
                marks.extend(_marks(handle.fileno(), chunk, ahead, previous == b"\n", start, before[-1],
                                    MAX_MARKS - len(marks)))
            previous = chunk[-1:]
            start += len(chunk)
            if len(chunk) == BLOCK:
                before.append(before[-1] + chunk.count(b"\n"))
                last = 0
            else:
                last = chunk.count(b"\n")
                break
    return LineIndex(index.inode, start, before, last, tuple(marks))


def _marks(fd: int, chunk: bytes, ahead: bytes, at_line_start: bool, start: int, lines_before: int, room: int
           ) -> list[Mark]:
    """The marker lines beginning in `chunk` (read at byte `start`, after `lines_before` newlines; `ahead`: the
    bytes after it)."""
    found: list[Mark] = []
    counted_to, counted = 0, lines_before
    size, chunk = len(chunk), chunk + ahead
    for position in _line_starts_with_colons(chunk, at_line_start, size):
        end = chunk.find(b"\n", position)
        # A marker line running past this block is read on its own (at most a title's worth).
        text = chunk[position:end] if end >= 0 else os.pread(fd, MAX_TITLE_CHARS * 4 + 16, start + position)
        title = mark_title(text.split(b"\n", 1)[0])
        if title is False:
            continue
        counted += chunk.count(b"\n", counted_to, position)
        counted_to = position
        found.append(Mark(counted, start + position, title))
        if len(found) >= room:
            break
    return found


def _line_starts_with_colons(chunk: bytes, at_line_start: bool, size: int) -> Iterator[int]:
    """Where lines starting with "::" begin, before `size` (a line starting at `size` is the next block's)."""
    if at_line_start and chunk.startswith(b"::"):
        yield 0
    position = chunk.find(b"\n::")
    while 0 <= position < size - 1:
        yield position + 1
        position = chunk.find(b"\n::", position + 1)


def mark_title(raw: bytes) -> str | None | bool:
    """A marker line's title (str), None for an end marker, False for any other line."""
    if raw.startswith(END_GROUP):
        return None
    if not raw.startswith(GROUP):
        return False
    text = _UNPRINTABLE.sub("", raw[len(GROUP):].decode("utf-8", errors="replace")).strip()
    return text[:MAX_TITLE_CHARS] or "(untitled)"


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
    at: int | None = None  # when it was written (Unix ms), from the worker's sidecar
    mark: str = ""  # "group": a section's first line (html is its title); "end": a section's end marker

    @property
    def clock(self) -> str:
        return log_times.clock(self.at) if self.at is not None else ""

    @property
    def iso(self) -> str:
        return log_times.iso(self.at) if self.at is not None else ""


def render(lines: list[bytes], first_number: int, start: int | None = None, directory: Path | None = None
           ) -> list[LogLine]:
    """Lines as HTML; with the byte offset of the first and the log's directory, each with its time."""
    times: list[int | None] = [None] * len(lines)
    if start is not None and directory is not None:
        offsets, at = [], start
        for raw in lines:
            offsets.append(at)
            at += len(raw)
        times = log_times.times_at(directory, offsets)
    state = AnsiState()
    out = []
    for offset, raw in enumerate(lines):
        text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        title = mark_title(raw.rstrip(b"\r\n")) if raw.startswith(b"::") else False
        if title is not False:
            html = line_to_html(title, AnsiState()) if title is not None else Markup("")
            out.append(LogLine(first_number + offset, html, False, times[offset], "group" if title else "end"))
            continue
        cut = len(text) > MAX_LINE_CHARS
        out.append(LogLine(first_number + offset, line_to_html(text[:MAX_LINE_CHARS], state), cut, times[offset]))
    return out


def page(path: Path, number: int) -> list[LogLine]:
    """Lines of 1-based page `number` (LINES_PER_PAGE per page)."""
    first = (number - 1) * LINES_PER_PAGE
    start = offset_of_line(path, first)
    with open_file(path.parent, path.name) as handle:
        handle.seek(start)
        data = handle.read(MAX_PAGE_BYTES)
    lines = data.splitlines(keepends=True)[:LINES_PER_PAGE]
    return render(lines, first + 1, start, path.parent)


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
    return render(data.splitlines(keepends=True), lines_before(path, start) + 1, start, path.parent), size, start > 0


def chunk_from(path: Path, offset: int, max_bytes: int, final: bool) -> tuple[list[LogLine], int]:
    """Complete lines written at or after `offset` (a partial last line too once the job finished)."""
    size = line_index(path).size
    offset = min(max(0, offset), size)
    with open_file(path.parent, path.name) as handle:
        handle.seek(offset)
        data = handle.read(min(max_bytes, size - offset))
    if not (final and offset + len(data) == size):
        data = data[: data.rfind(b"\n") + 1]
    lines = render(data.splitlines(keepends=True), lines_before(path, offset) + 1, offset, path.parent)
    return lines, offset + len(data)
