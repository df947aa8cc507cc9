"""Reading logs by line without loading them: pages, tail, live chunks, ANSI colours, across 1 MiB blocks."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.web.browser import log_pages, log_search, logs
from service.web.browser.ansi import AnsiState, line_to_html
from tests.browser.seed import write_log


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    # 64-byte blocks put block boundaries inside lines, where off-by-one errors live.
    monkeypatch.setattr(logs, "BLOCK", 64)
    logs._cache.clear()


def numbered(count: int) -> bytes:
    return b"".join(b"line %d %s\n" % (i, b"x" * (i % 37)) for i in range(1, count + 1))


@pytest.mark.usefixtures("small_blocks")
@pytest.mark.parametrize("wanted", [1, 2, 3, 17, 63, 64, 65, 199, 200])
def test_offset_of_every_line_matches_a_plain_split(tmp_path: Path, wanted: int) -> None:
    path = tmp_path / "log.txt"
    path.write_bytes(numbered(200))
    offset = logs.offset_of_line(path, wanted - 1)
    assert path.read_bytes()[offset:].startswith(b"line %d " % wanted)
    assert logs.lines_before(path, offset) == wanted - 1
    assert logs.total_lines(path) == 200


@pytest.mark.usefixtures("small_blocks")
def test_index_follows_a_growing_log(tmp_path: Path) -> None:
    path = tmp_path / "log.txt"
    path.write_bytes(numbered(50))
    assert logs.total_lines(path) == 50
    with open(path, "ab") as handle:
        handle.write(numbered(120)[len(numbered(50)):] + b"partial")
    assert logs.total_lines(path) == 121
    lines, offset = logs.chunk_from(path, 0, 1 << 20, final=False)
    assert [line.number for line in lines][-1] == 120 and offset == path.stat().st_size - len(b"partial")
    lines, _ = logs.chunk_from(path, offset, 1 << 20, final=True)  # the job finished: the partial line too
    assert [(line.number, str(line.html)) for line in lines] == [(121, "partial")]


def test_pages_and_tail_number_lines_like_an_editor(tmp_path: Path) -> None:
    path = tmp_path / "log.txt"
    path.write_bytes(numbered(2500))
    assert logs.page_count(path) == 3
    third = logs.page(path, 3)
    assert third[0].number == 2001 and str(third[0].html).startswith("line 2001 ") and len(third) == 500
    tail, size, cut = logs.tail(path, 200)
    assert cut and size == path.stat().st_size and tail[-1].number == 2500
    assert str(tail[0].html).startswith(f"line {tail[0].number} ")


def test_ansi_colours_become_spans_and_text_stays_escaped() -> None:
    state = AnsiState()
    html = str(line_to_html("\x1b[31m\x1b[1mFAILED\x1b[0m <script>x</script>\x1b[2K", state))
    assert html == '<span class="ansi31 ansib">FAILED</span> &lt;script&gt;x&lt;/script&gt;'
    assert str(line_to_html("\x1b[32mPASSED", state)) == '<span class="ansi32">PASSED</span>'
    assert str(line_to_html("still green", state)) == '<span class="ansi32">still green</span>'


@pytest.mark.usefixtures("small_blocks")
def test_search_finds_every_matching_line_with_its_number_across_blocks(tmp_path: Path) -> None:
    path = tmp_path / "log.txt"
    path.write_bytes(numbered(300) + b"last line without newline X")
    found = log_search.search(path, "LINE 1")  # either case
    expected = [n for n in range(1, 301) if str(n).startswith("1")]
    assert [line.number for line in found.lines] == expected and found.complete
    assert all(str(line.html).startswith(f"line {line.number} ") for line in found.lines)
    # A 150-byte line over two 64-byte blocks, the text in both: listed once, whole.
    crossing = tmp_path / "crossing.log"
    crossing.write_bytes(b"head\n" + b"needle " + b"." * 140 + b" needle\n" + b"tail needle\n")
    found = log_search.search(crossing, "NEEDLE")
    assert [(line.number, len(str(line.html))) for line in found.lines] == [(2, 154), (3, 11)]
    tail = log_search.search(path, "without newline x")
    assert [(line.number, str(line.html)) for line in tail.lines] == [(301, "last line without newline X")]


def test_search_stops_at_the_hit_limit_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_search, "MAX_HITS", 5)
    path = tmp_path / "log.txt"
    path.write_bytes(numbered(100))
    found = log_search.search(path, "line")
    assert [line.number for line in found.lines] == [1, 2, 3, 4, 5] and not found.complete


def test_search_of_a_50_mb_log_finds_its_last_line(tmp_path: Path) -> None:
    # Its speed is a figure of bench/job_page.py (the job page's budget), not an assertion here.
    path = tmp_path / "log.txt"
    write_log(path, 50_000_000)
    found = log_search.search(path, "FAILED")  # one line, the very last: the whole file is scanned
    assert [line.number for line in found.lines] == [logs.total_lines(path)] and found.complete


def test_pytest_sections_fold_and_the_warnings_summary_starts_folded(tmp_path: Path) -> None:
    path = tmp_path / "log.txt"
    path.write_bytes(b"prelude\n\x1b[1m===== test session starts =====\x1b[0m\ncollected 2 items\nt.py ..\n"
                     b"===== warnings summary =====\nDeprecationWarning: x\n"
                     b"===== short test summary info =====\nFAILED t.py::test_a\n")
    sections = log_pages.sections(logs.page(path, 1))
    assert [(s.title, [line.number for line in s.lines], s.folded) for s in sections] == [
        ("", [1], False), ("test session starts", [3, 4], False), ("warnings summary", [6], True),
        ("short test summary info", [8], False)]
