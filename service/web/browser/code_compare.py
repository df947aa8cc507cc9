"""A test's generated code, base → head: graphs paired, each pair a highlighted unified diff of normalised code,
next to the outcomes and compile ledger of both sides.

Both sides' files were written by jobs (the head's by the pull request's code): only regular files inside the
attempt's directory are read, at most MAX_GRAPHS of them, FILE_LIMIT bytes each and SIDE_LIMIT bytes in all
(later graphs are listed, not compared); a file with NUL bytes is binary and not compared; a graph's diff shows at
most MAX_DIFF_LINES lines, the page PAGE_DIFF_LINES. Pygments escapes everything it renders.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from flask import Blueprint, render_template
from markupsafe import Markup
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import DiffLexer

from runners.untrusted_files import is_regular, open_dir, read_head
from service.compare import codediff
from service.web.browser import base_lookup, ledger_view, queries
from service.web.browser.attempts import load_attempt
from service.web.browser.jobs import read_metrics
from service.web.browser.lookup import test_dir, wiring
from suites.naming import sanitise_nodeid

blueprint = Blueprint("code_compare", __name__)
MAX_GRAPHS = 64
FILE_LIMIT = 256 * 1024
SIDE_LIMIT = 1024 * 1024
MAX_DIFF_LINES = 4000
PAGE_DIFF_LINES = 10_000
CODE_PREFIX = "output_code_"


@dataclass(frozen=True)
class CodeFile:
    name: str
    text: str
    cut: bool  # longer than FILE_LIMIT: only the beginning was read
    binary: bool
    unread: bool = False  # beyond SIDE_LIMIT: not read at all


def _graph_number(path: Path) -> int:
    suffix = path.stem.rsplit("_", 1)[-1]
    return int(suffix) if suffix.isascii() and suffix.isdigit() and len(suffix) < 9 else 1 << 30


def _names(folder: Path) -> list[str]:
    try:
        with open_dir(folder) as fd:
            return os.listdir(fd)
    except OSError:
        return []


def code_paths(folder: Path) -> list[Path]:
    """The test folder's `output_code_<n>.py` files in graph order: regular files only (a job can leave a link to
    /etc/passwd or a FIFO under that name), inside the folder, at most MAX_GRAPHS."""
    found = [folder / name for name in _names(folder)
             if name.startswith(CODE_PREFIX) and name.endswith(".py") and is_regular(folder, name)]
    return sorted(found, key=lambda p: (_graph_number(p), p.name))[:MAX_GRAPHS]


def read_codes(folder: Path | None) -> list[CodeFile]:
    codes, left = [], SIDE_LIMIT
    for path in code_paths(folder) if folder is not None else []:
        if left <= 0:
            codes.append(CodeFile(path.name, "", True, False, unread=True))
            continue
        try:
            raw, _size = read_head(path.parent, path.name, min(FILE_LIMIT, left) + 1)
        except OSError:
            continue
        kept = raw[:min(FILE_LIMIT, left)]
        left -= len(kept)
        binary = b"\x00" in raw
        codes.append(CodeFile(path.name, "" if binary else kept.decode("utf-8", errors="replace"),
                              len(raw) > len(kept), binary))
    return codes


@dataclass(frozen=True)
class GraphDiff:
    base_name: str  # "" for a graph only the head compiled
    head_name: str  # "" for a graph only the base compiled
    state: str  # changed | identical | added | removed | binary | unread
    html: Markup
    added: int
    removed: int
    cut: bool  # a file was longer than FILE_LIMIT, or not all the diff is shown
    shown: int = 0  # lines of the diff shown


def _rendered(lines: list[str], formatter: HtmlFormatter, most: int) -> tuple[Markup, int]:
    """The diff highlighted, at most `most` lines of it, and how many lines that is."""
    shown = lines[:max(0, min(MAX_DIFF_LINES, most))]
    # Pygments escapes the text; the Markup only marks its (safe) HTML output.
    html = Markup(highlight("\n".join(shown) + "\n", DiffLexer(), formatter)) if shown else Markup("")
    return html, len(shown)


def _diff(one: CodeFile | None, other: CodeFile | None, formatter: HtmlFormatter, lines_left: int) -> GraphDiff:
    names = (one.name if one else "", other.name if other else "")
    for flag in ("binary", "unread"):
        if (one and getattr(one, flag)) or (other and getattr(other, flag)):
            return GraphDiff(*names, flag, Markup(""), 0, 0, flag == "unread")
    lines = codediff.unified(one.text if one else "", other.text if other else "")
    state = "added" if one is None else "removed" if other is None else "changed" if lines else "identical"
    html, shown = _rendered(lines, formatter, lines_left)
    added = sum(1 for line in lines[2:] if line.startswith("+"))
    removed = sum(1 for line in lines[2:] if line.startswith("-"))
    return GraphDiff(*names, state, html, added, removed,
                     shown < len(lines) or bool(one and one.cut) or bool(other and other.cut), shown)


def graph_diffs(base: list[CodeFile], head: list[CodeFile], formatter: HtmlFormatter) -> list[GraphDiff]:
    pairs = codediff.match_graphs([c.text for c in base], [c.text for c in head])
    diffs, lines_left = [], PAGE_DIFF_LINES
    for b, h in pairs:
        diffs.append(_diff(base[b] if b is not None else None, head[h] if h is not None else None, formatter,
                           lines_left))
        lines_left -= diffs[-1].shown
    return diffs


def test_of(job_id: str, attempt: int, name: str, metrics: dict) -> tuple[str, queries.ResultRow | None]:
    """The node id behind a test's directory name, and its stored result: the job's stored results first (they come
    from the JUnit report), else the node id its metrics.json names, else the name itself."""
    results = queries.results_of(wiring().store, job_id, attempt)
    nodeid = next((r.nodeid for r in results if sanitise_nodeid(r.nodeid) == name), "")
    nodeid = nodeid or str(metrics.get("nodeid") or name)
    return nodeid, next((r for r in results if r.nodeid == nodeid), None)


def _result(job_id: str, attempt: int, nodeid: str) -> queries.ResultRow | None:
    return next((r for r in queries.results_of(wiring().store, job_id, attempt) if r.nodeid == nodeid), None)


def _stored_metrics(result: queries.ResultRow | None) -> dict | None:
    return result.metrics if result is not None and isinstance(result.metrics, dict) and result.metrics else None


@blueprint.get("/jobs/<job_id>/tests/<name>/diff")
@blueprint.get("/jobs/<job_id>/attempts/<int:number>/tests/<name>/diff")
def diff_page(job_id: str, name: str, number: int | None = None) -> str:
    run, job, directory, _attempts = load_attempt(job_id, number)
    folder = test_dir(directory, name)
    head_metrics = read_metrics(folder)
    nodeid, head_result = test_of(job.id, job.attempt, name, head_metrics)
    base = base_lookup.base_of(wiring().store, wiring().settings.artifacts_dir, run, job.suite, job.device, job.torch)
    base_folder = base.test_folder(name)
    base_result = _result(base.job.id, base.job.attempt, nodeid) if base.job and not base.reason else None
    reason = base.reason or ("" if base_folder or base_result else
                             "The base run has no result for this test: it is new, or was renamed.")
    base_metrics = (read_metrics(base_folder) if base_folder else {}) or _stored_metrics(base_result)
    head_metrics = head_metrics or _stored_metrics(head_result) or {}
    formatter = HtmlFormatter(cssclass="code diff")
    head_codes = read_codes(folder)
    base_codes = read_codes(base_folder) if not reason else []
    diffs = graph_diffs(base_codes, head_codes, formatter) if not reason else []
    changed = [d for d in diffs if d.state != "identical"]
    return render_template(
        "diff.html", run=run, job=job, name=name, nodeid=nodeid, base=base, reason=reason,
        head_outcome=head_result.outcome if head_result else str(head_metrics.get("outcome") or ""),
        base_outcome=base_result.outcome if base_result else "",
        classification=base_lookup.classification_of(wiring().store, job.id, job.attempt, nodeid),
        head_codes=head_codes, base_codes=base_codes, diffs=diffs, changed=changed,
        figures=ledger_view.figures(base_metrics if not reason else None, head_metrics),
        reasons=ledger_view.reasons(base_metrics if not reason else None, head_metrics),
        pygments_css=Markup(formatter.get_style_defs(".diff")), file_limit_kib=FILE_LIMIT // 1024,
        side_limit_kib=SIDE_LIMIT // 1024, max_diff_lines=MAX_DIFF_LINES, page_diff_lines=PAGE_DIFF_LINES,
        max_graphs=MAX_GRAPHS,
    )
