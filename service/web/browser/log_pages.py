"""A job log in the browser: pages of lines folded by pytest's sections, line and range links, live chunks of
a running job, and a search of the whole log done on the server."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from flask import Blueprint, Response, abort, jsonify, redirect, render_template, request

from runners.untrusted_files import file_size, is_regular
from service.web.browser import log_search, logs
from service.web.browser.attempts import load_attempt
from service.web.browser.lookup import number_arg

blueprint = Blueprint("log_pages", __name__)
LIVE_CHUNK_BYTES = 64 * 1024
# pytest's section rules: "==== warnings summary ====" (ANSI stripped, as rendered HTML without its tags)
SECTION = re.compile(r"^={3,} (?P<title>.+?) ={3,}$")
FOLDED = ("warnings summary",)  # long and rarely what a maintainer came for: closed until asked
LINE_OR_RANGE = re.compile(r"^(?P<first>[0-9]{1,9})(?:-L?(?P<last>[0-9]{1,9}))?$")


@dataclass
class Section:
    header: logs.LogLine | None  # None: lines before the page's first section rule
    title: str = ""
    lines: list[logs.LogLine] = field(default_factory=list)

    @property
    def folded(self) -> bool:
        return self.title in FOLDED


def sections(lines: list[logs.LogLine]) -> list[Section]:
    out = [Section(None)]
    for line in lines:
        match = SECTION.match(re.sub(r"<[^>]*>", "", str(line.html)).strip())
        if match:
            out.append(Section(line, match.group("title")))
        else:
            out[-1].lines.append(line)
    return [s for s in out if s.header is not None or s.lines]


@blueprint.get("/jobs/<job_id>/log")
@blueprint.get("/jobs/<job_id>/attempts/<int:number>/log")
def log_page(job_id: str, number: int | None = None) -> Response | str:
    run, job, directory, _attempts = load_attempt(job_id, number)
    path = directory / "log.txt"
    if not job.ran or not is_regular(directory, "log.txt"):
        abort(404)
    pages = logs.page_count(path)
    wanted = LINE_OR_RANGE.match(request.args.get("line", ""))
    if wanted:  # /log?line=N or ?line=N-M: the page holding line N, scrolled to it (the range marked)
        first = max(1, int(wanted["first"]))
        last = int(wanted["last"]) if wanted["last"] else 0
        anchor = f"#L{first}-L{last}" if last > first else f"#L{first}"
        return redirect(f"{job.base}/log?page={(first - 1) // logs.LINES_PER_PAGE + 1}{anchor}")
    raw = number_arg(request.args.get("page"), 0)
    page = min(raw, pages) if raw > 0 else pages
    return render_template("log.html", run=run, job=job, sections=sections(logs.page(path, page)), page=page,
                           pages=pages)


@blueprint.get("/jobs/<job_id>/log/search")
@blueprint.get("/jobs/<job_id>/attempts/<int:number>/log/search")
def log_search_page(job_id: str, number: int | None = None) -> str:
    run, job, directory, _attempts = load_attempt(job_id, number)
    path = directory / "log.txt"
    if not job.ran or not is_regular(directory, "log.txt"):
        abort(404)
    query = request.args.get("q", "")[:log_search.MAX_QUERY_CHARS]
    found = log_search.search(path, query) if query.strip() else None
    return render_template("log_search.html", run=run, job=job, query=query, found=found,
                           max_hits=log_search.MAX_HITS, line_base=f"{job.base}/log?line=")


@blueprint.get("/jobs/<job_id>/log/live")
def log_live(job_id: str) -> Response:
    """Lines written since `offset`, rendered; the page appends them until the job completes."""
    _run, job, directory, _attempts = load_attempt(job_id, None)
    path = directory / "log.txt"
    offset = number_arg(request.args.get("offset"), 0)
    finished = job.state == "completed"
    size = file_size(directory, "log.txt") if job.ran else None
    lines, next_offset = logs.chunk_from(path, offset, LIVE_CHUNK_BYTES, finished) if size is not None else ([], 0)
    html = render_template("log_lines.html", lines=lines, line_base=f"/jobs/{job.id}/log?line=")
    more = next_offset < size if size is not None else False
    return jsonify(html=html, offset=next_offset, state=job.state, conclusion=job.conclusion, more=more)
