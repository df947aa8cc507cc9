"""Reading logs by line without loading them: pages, tail, live chunks, ANSI colours, across 1 MiB blocks; the
job's sections and each line's time; find's line numbers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from runners import job_log
from service.config import Settings
from service.store import Store
from service.web.browser import log_pages, log_search, logs
from service.web.browser.ansi import AnsiState, line_to_html
from tests.browser.seed import SeededTest, seed_job, seed_run, write_job_log, write_log


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


MARKED = (b"$ pytest\n::group::Install the repository\npip output\n::endgroup::\n::group::Collect tests\n"
          b"collected 3 items\n::group::Run tests\n" + b"".join(b"t.py::test_%d PASSED\n" % i for i in range(20))
          + b"::group::Results\n== 20 passed ==\n")


@pytest.mark.usefixtures("small_blocks")
def test_section_markers_are_indexed_across_blocks_and_as_the_log_grows(tmp_path: Path) -> None:
    path = tmp_path / "log.txt"
    path.write_bytes(MARKED[:150])  # the log of a running job, cut inside the test lines
    index = logs.line_index(path)
    assert [(m.line, m.title) for m in index.marks] == [
        (1, "Install the repository"), (3, None), (4, "Collect tests"), (6, "Run tests")]
    with open(path, "ab") as handle:
        handle.write(MARKED[150:])
    index = logs.line_index(path)
    assert [(m.line, m.title) for m in index.marks][-1] == (27, "Results")
    assert all(path.read_bytes()[m.offset:].startswith(b"::") for m in index.marks)
    # A marker only counts at the start of a line; a 64-byte block boundary inside one is no matter.
    for shift in range(64):
        logs._cache.clear()
        path.write_bytes(b"x" * shift + b"\nnot ::group::a marker\n::group::" + b"t" * 100 + b"\n")
        assert [(m.line, m.title) for m in logs.line_index(path).marks] == [(2, "t" * 100)], shift


def test_a_marker_flood_is_capped_and_titles_stay_text(tmp_path: Path, client: FlaskClient, settings: Settings,
                                                      store: Store) -> None:
    job = seed_job(settings, store, seed_run(store), [SeededTest("t.py::test_ok")])
    path = settings.artifacts_dir / job.run_id / job.id / "1" / "log.txt"
    path.write_bytes(b"::group::<img src=x onerror=alert(1)>\x1b[31m\x07\n" + b"::group::again\n" * 5000)
    assert len(logs.line_index(path).marks) == logs.MAX_MARKS
    page = client.get(f"/jobs/{job.id}/log?page=1").get_data(as_text=True)
    assert "&lt;img src=x onerror=alert(1)&gt;</span>" in page and "<img" not in page


def test_each_section_knows_where_it_started_and_how_long_it_took(settings: Settings, store: Store) -> None:
    job = seed_job(settings, store, seed_run(store), [SeededTest("t.py::test_ok")])
    out = settings.artifacts_dir / job.run_id / job.id / "1"
    write_job_log(out, 1_767_323_045_000, tests=1200, failing=1100)
    path = out / "log.txt"
    index = logs.line_index(path)
    first = log_pages.groups(logs.page(path, 1), index, out, finished=True)
    assert [(g.title, g.took, g.folded, g.header.number if g.header else None) for g in first] == [
        ("", "", False, None), ("Install the repository (pip install -e . --no-deps --no-index)", "12 s", True, 2),
        ("Collect tests", "3.0 s", True, 6), ("Run tests", "20 m 00 s", False, 10)]
    second = log_pages.groups(logs.page(path, 2), index, out, finished=True)
    assert [(g.title, g.continued, g.took) for g in second] == [
        ("Run tests", True, "20 m 00 s"), ("Results", False, "0.4 s")]
    assert [s.title for s in second[1].sections] == ["FAILURES", "warnings summary", "short test summary info",
                                                     "1 failed, 1199 passed in 1200.00s"]
    running = log_pages.groups(logs.page(path, 2), index, out, finished=False)
    assert running[-1].took == ""  # the last section of a running job has no end yet
    # The log ends in the install (it failed there): that section is where to look, so it stays open.
    path.write_bytes(b"$ pytest\n::group::Install the repository\nERROR: no build backend\n")
    logs._cache.clear()
    (install,) = [g for g in log_pages.groups(logs.page(path, 1), logs.line_index(path), out, True) if g.title]
    assert install.title == "Install the repository" and not install.folded


def test_the_worker_writes_the_raw_log_plain_and_its_times_beside_it(tmp_path: Path) -> None:
    chunks = [b"$ pytest\n", b"t.py::test_a ", b"PASSED\nt.py::test_b ", b"FAILED\n"]
    before = job_log.now_ms()
    with job_log.LogSink(tmp_path / "log.txt", limit=1 << 20) as sink:
        for chunk in chunks:
            sink.write(chunk)
    assert (tmp_path / "log.txt").read_bytes() == b"".join(chunks)  # the download: exactly what the job printed
    lines = logs.page(tmp_path / "log.txt", 1)
    assert [line.number for line in lines] == [1, 2, 3] and all(line.at is not None for line in lines)
    assert before <= lines[0].at <= lines[-1].at <= job_log.now_ms()  # type: ignore[operator]
    tail, _size, _cut = logs.tail(tmp_path / "log.txt", 1 << 20)  # the job page's live view has them too
    live, _offset = logs.chunk_from(tmp_path / "log.txt", 0, 1 << 20, final=True)
    assert [line.at for line in tail] == [line.at for line in live] == [line.at for line in lines]


@pytest.mark.parametrize("planted", ["link", "fifo", "garbage", "backwards"])
def test_a_sidecar_the_job_planted_gives_no_time_or_a_plausible_one(tmp_path: Path, planted: str) -> None:
    """Older attempts' directories hold what their jobs left, a `log.times` among them."""
    (tmp_path / "log.txt").write_bytes(b"one\ntwo\nthree\n")
    times = tmp_path / "log.times"
    record = job_log.TIME_RECORD.pack
    if planted == "link":
        (tmp_path / "elsewhere").write_bytes(record(0, 1_767_323_045_000))
        times.symlink_to(tmp_path / "elsewhere")
    elif planted == "fifo":
        os.mkfifo(times)
    elif planted == "garbage":
        times.write_bytes(b"\xff" * 16 * 1000 + b"\x01")
    else:
        times.write_bytes(record(4, 1_767_323_045_000) + record(0, 1_767_323_046_000) + record(8, 1))
    at = [line.at for line in logs.page(tmp_path / "log.txt", 1)]
    if planted == "backwards":  # read up to where the records stop making sense: a time it wrote, or none
        assert all(a in (None, 1_767_323_045_000, 1_767_323_046_000) for a in at) and 1 not in at
    else:
        assert at == [None] * 3


def test_find_lists_line_numbers_and_a_search_result_opens_highlighted(client: FlaskClient, settings: Settings,
                                                                       store: Store) -> None:
    job = seed_job(settings, store, seed_run(store), [SeededTest("t.py::test_ok")])
    out = settings.artifacts_dir / job.run_id / job.id / "1"
    write_job_log(out, 1_767_323_045_000, tests=1200, failing=1100)
    hits = client.get(f"/jobs/{job.id}/log/hits?q=TEST_CASE%5B1100%5D").get_json()
    assert hits == {"lines": [1111, 1213, 1247], "complete": True, "per_page": 1000}
    assert client.get(f"/jobs/{job.id}/attempts/1/log/hits?q=").get_json()["lines"] == []
    answer = client.get(f"/jobs/{job.id}/log?q=a%26b%23c&line=1111")
    assert answer.status_code == 302 and answer.location == f"/jobs/{job.id}/log?page=2&q=a%26b%23c#L1111"
    search = client.get(f"/jobs/{job.id}/log/search?q=test_case%5B1100%5D").get_data(as_text=True)
    assert f'href="/jobs/{job.id}/log?q=test_case%5B1100%5D&amp;line=1111"' in search
