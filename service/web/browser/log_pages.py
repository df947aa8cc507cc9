"""A job log in the browser: pages of lines in collapsible sections (the job's install / collect / test / results
markers, and pytest's own `====` sections inside them), each line with its time, line and range links, live chunks
of a running job, and a search of the whole log done on the server (a page of hits, or line numbers for the
viewer's in-page find)."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from flask import Blueprint, Response, abort, jsonify, redirect, render_template, request

from runners.untrusted_files import file_size, is_regular
from service.web.browser import log_search, log_times, logs
from service.web.browser.attempts import load_attempt
from service.web.browser.lookup import number_arg

blueprint = Blueprint("log_pages", __name__)
LIVE_CHUNK_BYTES = 64 * 1024
# pytest's section rules: "==== warnings summary ====" (ANSI stripped, as rendered HTML without its tags)
SECTION = re.compile(r"^={3,} (?P<title>.+?) ={3,}$")
FOLDED = ("warnings summary",)  # long and rarely what a maintainer came for: closed until asked
# Set-up sections, closed unless the log ended in one (then it is where the job stopped: an install failure).
FOLDED_GROUPS = ("Install", "Collect")
LINE_OR_RANGE = re.compile(r"^(?P<first>[0-9]{1,9})(?:-L?(?P<last>[0-9]{1,9}))?$")


@dataclass
class Section:
    header: logs.LogLine | None  # None: lines before the page's first section rule
    title: str = ""
    lines: list[logs.LogLine] = field(default_factory=list)

    @property
    def folded(self) -> bool:
        return self.title in FOLDED


@dataclass
class Group:
    """A marked section of the job (or the lines outside any): its pytest sections inside."""

    header: logs.LogLine | None  # the marker line; None outside sections, or for one continued from a page before
    title: str = ""
    mark: logs.Mark | None = None
    lines: list[logs.LogLine] = field(default_factory=list)
    folded: bool = False
    took: str = ""

    @property
    def continued(self) -> bool:
        return self.header is None and bool(self.title)

    @property
    def sections(self) -> list[Section]:
        return sections(self.lines)


def sections(lines: list[logs.LogLine]) -> list[Section]:
    out = [Section(None)]
    for line in lines:
        match = SECTION.match(re.sub(r"<[^>]*>", "", str(line.html)).strip())
        if match:
            out.append(Section(line, match.group("title")))
        else:
            out[-1].lines.append(line)
    return [s for s in out if s.header is not None or s.lines]


def groups(lines: list[logs.LogLine], index: logs.LineIndex, directory: Path, finished: bool) -> list[Group]:
    """The page's lines by section, each section's default fold and how long it took."""
    if not lines:
        return []
    by_line = {mark.line: mark for mark in index.marks}
    opened = index.open_at(lines[0].number - 1)
    current = Group(None, opened.title or "", opened) if opened is not None and opened.title else Group(None)
    out = [current]
    for line in lines:
        if line.mark == "group":
            mark = by_line.get(line.number - 1)
            title = (mark.title or "") if mark is not None else html.unescape(re.sub(r"<[^>]*>", "", str(line.html)))
            current = Group(line, title, mark)
            out.append(current)
            continue
        current.lines.append(line)
        if line.mark == "end":
            current = Group(None)
            out.append(current)
    found = [group for group in out if group.header is not None or group.lines]
    _time_and_fold(found, index, directory, finished)
    return found


def _time_and_fold(found: list[Group], index: logs.LineIndex, directory: Path, finished: bool) -> None:
    marks = list(index.marks)
    last_group = max((m.line for m in marks if m.title is not None), default=-1)
    spans: dict[int, tuple[int, int | None]] = {}  # mark line -> (start offset, end offset or None: the log's end)
    for position, mark in enumerate(marks):
        if mark.title is not None:
            spans[mark.line] = (mark.offset, marks[position + 1].offset if position + 1 < len(marks) else None)
    offsets = sorted({o for start, end in spans.values() for o in (start, end) if o is not None})
    at = dict(zip(offsets, log_times.times_at(directory, offsets), strict=True))
    end_of_log = log_times.last_time(directory) if finished else None
    for group in found:
        if group.mark is None or group.mark.line not in spans:
            continue
        start, end = spans[group.mark.line]
        began, ended = at.get(start), at.get(end) if end is not None else end_of_log
        if began is not None and ended is not None:
            group.took = log_times.duration((ended - began) / 1000)
        group.folded = group.title.startswith(FOLDED_GROUPS) and group.mark.line != last_group


def _log_path(directory: Path, ran: bool) -> Path:
    if not ran or not is_regular(directory, "log.txt"):
        abort(404)
    return directory / "log.txt"


@blueprint.get("/jobs/<job_id>/log")
@blueprint.get("/jobs/<job_id>/attempts/<int:number>/log")
def log_page(job_id: str, number: int | None = None) -> Response | str:
    run, job, directory, _attempts = load_attempt(job_id, number)
    path = _log_path(directory, job.ran)
    pages = logs.page_count(path)
    query = request.args.get("q", "")[:log_search.MAX_QUERY_CHARS]
    wanted = LINE_OR_RANGE.match(request.args.get("line", ""))
    if wanted:  # /log?line=N or ?line=N-M: the page holding line N, scrolled to it (the range marked)
        first = max(1, int(wanted["first"]))
        last = int(wanted["last"]) if wanted["last"] else 0
        anchor = f"#L{first}-L{last}" if last > first else f"#L{first}"
        find = f"&q={quote(query, safe='')}" if query else ""  # a search result keeps its words highlighted
        return redirect(f"{job.base}/log?page={(first - 1) // logs.LINES_PER_PAGE + 1}{find}{anchor}")
    raw = number_arg(request.args.get("page"), 0)
    page = min(raw, pages) if raw > 0 else pages
    lines = logs.page(path, page)
    found = groups(lines, logs.line_index(path), directory, job.state == "completed")
    return render_template("log.html", run=run, job=job, groups=found, page=page, pages=pages, query=query,
                           has_times=any(line.at is not None for line in lines), per_page=logs.LINES_PER_PAGE)


@blueprint.get("/jobs/<job_id>/log/search")
@blueprint.get("/jobs/<job_id>/attempts/<int:number>/log/search")
def log_search_page(job_id: str, number: int | None = None) -> str:
    run, job, directory, _attempts = load_attempt(job_id, number)
    path = _log_path(directory, job.ran)
    query = request.args.get("q", "")[:log_search.MAX_QUERY_CHARS]
    found = log_search.search(path, query) if query.strip() else None
    return render_template("log_search.html", run=run, job=job, query=query, found=found,
                           max_hits=log_search.MAX_HITS,
                           line_base=f"{job.base}/log?q={quote(query, safe='')}&line=")


@blueprint.get("/jobs/<job_id>/log/hits")
@blueprint.get("/jobs/<job_id>/attempts/<int:number>/log/hits")
def log_hits(job_id: str, number: int | None = None) -> Response:
    """The numbers of the lines holding `q`, for the viewer's find (highlight, next and previous across pages)."""
    _run, job, directory, _attempts = load_attempt(job_id, number)
    path = _log_path(directory, job.ran)
    query = request.args.get("q", "")[:log_search.MAX_QUERY_CHARS]
    found = log_search.search(path, query) if query.strip() else None
    return jsonify(lines=[line.number for line in found.lines] if found else [],
                   complete=found.complete if found else True, per_page=logs.LINES_PER_PAGE)


@blueprint.get("/jobs/<job_id>/log/live")
def log_live(job_id: str) -> Response:
    """Lines written since `offset`, rendered; the page appends them until the job completes."""
    _run, job, directory, _attempts = load_attempt(job_id, None)
    path = directory / "log.txt"
    offset = number_arg(request.args.get("offset"), 0)
    finished = job.state == "completed"
    size = file_size(directory, "log.txt") if job.ran else None
    lines, next_offset = logs.chunk_from(path, offset, LIVE_CHUNK_BYTES, finished) if size is not None else ([], 0)
    rendered = render_template("log_lines.html", lines=lines, line_base=f"/jobs/{job.id}/log?line=")
    more = next_offset < size if size is not None else False
    return jsonify(html=rendered, offset=next_offset, state=job.state, conclusion=job.conclusion, more=more)
