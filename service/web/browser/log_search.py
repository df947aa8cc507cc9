"""Searching a whole job log on the server: a 50 MB log is never sent to the browser to be searched there.

The file is scanned in 1 MiB blocks, each lowered once and searched with bytes.find (a regex with IGNORECASE took
650 ms over 50 MB, this about a sixth); a hit's line number comes from the log's line index (newlines per block,
which the job page builds anyway), so blocks without a hit cost no counting. It stops at the first MAX_HITS
matching lines, or after MAX_SECONDS, and says so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from runners.untrusted_files import open_file
from service.web.browser import logs
from service.web.browser.logs import LogLine, render

MAX_HITS = 500
MAX_QUERY_CHARS = 200
MAX_SECONDS = 2.0  # past this the answer says where the scan stopped, instead of holding a web worker


@dataclass(frozen=True)
class Found:
    lines: list[LogLine]
    complete: bool  # the whole log was searched and every matching line is listed
    scanned_bytes: int


def search(path: Path, query: str) -> Found:
    """Lines containing `query` (literal, ASCII letters in either case), in order."""
    needle = query[:MAX_QUERY_CHARS].encode().lower()
    index = logs.line_index(path)  # newlines per block: a hit's line number without counting the blocks before
    hits: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + MAX_SECONDS
    block_size, overlap = logs.BLOCK, len(needle) - 1  # a hit may straddle two blocks
    with open_file(path.parent, path.name) as handle:
        for number in range(-(-index.size // block_size)):
            first = number * block_size
            handle.seek(first)
            data = handle.read(min(block_size + overlap, index.size - first))
            lowered = data.lower()
            position = 0
            while 0 <= (found := lowered.find(needle, position)) < block_size:
                line = index.newlines_before[number] + data.count(b"\n", 0, found)  # 0-based
                end = data.find(b"\n", found)
                if hits and hits[-1][0] == line + 1:  # the rest of a line listed from the block before
                    if end < 0:
                        break
                    position = end + 1
                    continue
                start = data.rfind(b"\n", 0, found) + 1
                text = _whole_line(handle, path, line) if start == 0 and number else None
                if text is None:
                    text = data[start:end + 1] if end >= 0 else _whole_line(handle, path, line)
                hits.append((line + 1, text))
                if len(hits) >= MAX_HITS:
                    return Found(_rendered(hits), False, first + found)
                if end < 0:
                    break  # the line runs into the next block, which starts past its hits
                position = end + 1
            if time.monotonic() > deadline:
                return Found(_rendered(hits), False, min(index.size, first + block_size))
    return Found(_rendered(hits), True, index.size)


def _whole_line(handle: BinaryIO, path: Path, line: int) -> bytes:
    """A line that crosses a block boundary (rare): read from its start, up to the longest line a page shows."""
    at = handle.tell()
    handle.seek(logs.offset_of_line(path, line))
    text = handle.readline(logs.MAX_LINE_CHARS * 4 + 1)
    handle.seek(at)
    return text


def _rendered(hits: list[tuple[int, bytes]]) -> list[LogLine]:
    return [render([raw], number)[0] for number, raw in hits]
