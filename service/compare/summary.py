"""The check run's "Against the base" section and the annotations a judgement adds (pure markdown)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from service.compare.judgement import BaseInfo, BaseStatus, Delta, Judgement, TestJudgement
from service.compare.verdicts import Verdict
from service.github.annotations import annotation
from service.github.markdown import code_span, link, plain

MAX_LISTED = 20
MAX_DELTAS = 10
FIGURE_NAMES = {"graph_breaks": "graph breaks", "recompiles": "recompiles", "compile_time_s": "compile time (s)",
                "kernels_generated": "kernels", "code_bytes": "generated code (bytes)"}


def base_line(info: BaseInfo) -> str:
    job = f", {link('job', info.url)}" if info.url else ""
    where = f"{code_span(info.sha[:12])} ({info.kind}{job})" if info.sha else ""
    if info.status == BaseStatus.READY:
        return f"Compared with the base {where}."
    if info.status == BaseStatus.PENDING:
        return (f"The base {where} is still running: this check is judged as without a base for now and is "
                "updated when the base finishes.")
    if info.status == BaseStatus.BROKEN:
        return (f"The base {where} ended without test results ({plain(info.reason or 'no results', inline=True)}): "
                "judged as without a base.")
    return "No base result for this job: judged as without a base."


def render_section(judgement: Judgement, test_url: Callable[[str], str]) -> str:
    lines = ["", "### Against the base", "", base_line(judgement.base)]
    if judgement.base.status != BaseStatus.READY:
        return "\n".join(lines)
    counts = judgement.counts
    shown = [f"{counts[v.value]} {v.value.replace('_', ' ')}" for v in Verdict if counts[v.value]]
    lines += ["", ", ".join(shown) or "no tests"]
    for title, verdict in (("New failures", Verdict.NEW_FAILURE), ("Failing without a base result", Verdict.FAILED),
                           ("Failing at the base too (not counted against this pull request)",
                            Verdict.FAILING_AT_BASE),
                           ("Flaky: failed, then passed when re-run in this job", Verdict.FLAKY),
                           ("Known flaky: failed here, flaky across this repository's recent runs (not counted "
                            "against this pull request)", Verdict.KNOWN_FLAKY),
                           ("Fixed", Verdict.FIXED),
                           ("Not affected by this change, so not run: the base's results",
                            Verdict.NOT_AFFECTED)):
        lines += _listed(title, judgement.of(verdict), test_url)
    if judgement.violations:
        lines += ["", "**Budget violations** (`[budgets]` in .compile-ci.toml)", ""]
        lines += [f"- {_test_link(v.nodeid, test_url)}: {_said(v.describe())}"
                  for v in judgement.violations[:MAX_LISTED]]
    changed = judgement.code_changed
    if changed:
        lines += ["", f"**Generated code changed in {len(changed)} test{'s' if len(changed) != 1 else ''}**", ""]
        lines += [f"- {_test_link(t.nodeid, test_url)}" for t in changed[:MAX_LISTED]]
        lines += _more(len(changed))
    if judgement.deltas:
        lines += ["", "**Biggest compile-ledger changes**", "", "| test | figure | base | head |",
                  "|---|---|---:|---:|"]
        lines += [_delta_row(d) for d in judgement.deltas[:MAX_DELTAS]]
    return "\n".join(lines)


def _listed(title: str, tests: list[TestJudgement], test_url: Callable[[str], str]) -> list[str]:
    if not tests:
        return []
    lines = ["", f"**{title}**", ""]
    for t in tests[:MAX_LISTED]:
        # The detail is ours around the job's words (dynamo's reasons): prose; the job's own message is code.
        said = _said(t.detail) if t.detail else code_span(_first_line(t.message), limit=400) if t.message else ""
        lines.append(f"- {_test_link(t.nodeid, test_url)}" + (f": {said}" if said else ""))
    return lines + _more(len(tests))


def _more(n: int) -> list[str]:
    return [f"- … and {n - MAX_LISTED} more"] if n > MAX_LISTED else []


def _delta_row(d: Delta) -> str:
    fmt = "{:.3f}" if d.figure == "compile_time_s" else "{:g}"
    return (f"| {code_span(d.nodeid, table=True, limit=400)} | {FIGURE_NAMES[d.figure]} | {fmt.format(d.base)} "
            f"| {fmt.format(d.head)} |")


def _first_line(message: str) -> str:
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    return lines[0] if lines else ""


def _said(text: str) -> str:
    return plain(text[:400], inline=True)


def _test_link(nodeid: str, test_url: Callable[[str], str]) -> str:
    return link(code_span(nodeid, limit=400), test_url(nodeid))


def annotation_level(verdict: Verdict) -> str:
    """failure: counted against the pull request; warning: failing at the base too; notice: flaky."""
    if verdict in (Verdict.FAILING_AT_BASE, Verdict.KNOWN_FLAKY):
        return "warning"
    return "notice" if verdict == Verdict.FLAKY else "failure"


def violation_annotations(judgement: Judgement, locate: Callable[[str], tuple[str, int | None]],
                          check_name: str) -> list[dict[str, Any]]:
    """One failure annotation per budget violation, at the test, naming the figure and dynamo's reason."""
    notes = []
    for v in judgement.violations:
        path, line = locate(v.nodeid)
        notes.append(annotation(path, line, f"{check_name}: budget exceeded ({FIGURE_NAMES[v.figure]})",
                                f"{v.nodeid}: {v.describe()}"))
    return notes
