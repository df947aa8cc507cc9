"""The check run's "Against the base" section and the annotations a judgement adds (pure markdown)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from service.compare import bisection
from service.compare.job_verdict import counted
from service.compare.judgement import BaseInfo, BaseStatus, Judgement, TestJudgement
from service.compare.ledger_deltas import GRAPH_FIGURES, TIME_FIGURES, TIME_FLOOR_RATIO, TIME_FLOOR_S, Delta
from service.compare.verdicts import RED, Verdict
from service.github.annotations import annotation
from service.github.markdown import code_span, link, plain, shorten

MAX_LISTED = 20
MAX_DELTAS = 10  # besides graph breaks and recompiles
MAX_GRAPH_ROWS = 50
FIGURE_NAMES = {"graph_breaks": "graph breaks", "recompiles": "recompiles", "compile_time_s": "compile time (s)",
                "dynamo_time_s": "dynamo time (s)", "kernels_generated": "kernels",
                "code_bytes": "generated code (bytes)"}


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
    lines += ["", counts_line(judgement)]
    for title, verdicts in (("New failures", RED),
                            ("Failing at the base too (not counted against this pull request)",
                             (Verdict.FAILING_AT_BASE,)),
                            ("Flaky: failed, then passed when re-run in this job", (Verdict.FLAKY,)),
                            ("Known flaky: failed here, flaky across this repository's recent runs (not counted "
                             "against this pull request)", (Verdict.KNOWN_FLAKY,)),
                            ("Fixed", (Verdict.FIXED,)),
                            (_reused_title(judgement), (Verdict.NOT_AFFECTED,))):
        lines += _listed(title, judgement.of(*verdicts), test_url)
    if judgement.violations:
        lines += ["", "**Budget violations** (`[budgets]` in .compile-ci.toml)", ""]
        lines += [f"- {_test_link(v.nodeid, test_url)}: {_said(v.describe())}"
                  for v in judgement.violations[:MAX_LISTED]]
    changed = judgement.code_changed
    if changed:
        lines += ["", f"**Generated code changed in {len(changed)} test{'s' if len(changed) != 1 else ''}**", ""]
        lines += [f"- {_test_link(t.nodeid, test_url)}" for t in changed[:MAX_LISTED]]
        lines += _more(len(changed))
    lines += _ledger_lines(judgement, test_url)
    return "\n".join(lines)


# The counts line's words, in its order; a failure without a base result is a new failure, as the title counts it.
COUNTED: tuple[tuple[tuple[Verdict, ...], str, str], ...] = (
    (RED, "new failure", "new failures"), ((Verdict.FAILING_AT_BASE,), "failing at base", "failing at base"),
    ((Verdict.FLAKY,), "flaky", "flaky"), ((Verdict.KNOWN_FLAKY,), "known flaky", "known flaky"),
    ((Verdict.FIXED,), "fixed", "fixed"), ((Verdict.UNCHANGED,), "unchanged", "unchanged"),
    ((Verdict.PASSED,), "passed without a base result", "passed without a base result"),
    ((Verdict.SKIPPED,), "skipped", "skipped"),
    ((Verdict.NOT_AFFECTED,), "reused from the base", "reused from the base"))


def _reused_title(judgement: Judgement) -> str:
    job = f" ({link('job', judgement.base.url)})" if judgement.base.url else ""
    return f"Reused from the base job{job}, not run: nothing these tests depend on changed"


def counts_line(judgement: Judgement) -> str:
    """Every test counted once, in the title's words: "2 new failures, 1 failing at base, 5 unchanged"."""
    shown = [counted(len(judgement.of(*verdicts)), one, many) for verdicts, one, many in COUNTED]
    return ", ".join(said for said in shown if said) or "no tests"


def _ledger_lines(judgement: Judgement, test_url: Callable[[str], str]) -> list[str]:
    """Every change of graph breaks and recompiles (budgeted or not), then the biggest other changes, then what
    was not compared and why."""
    graphs = [d for d in judgement.deltas if d.figure in GRAPH_FIGURES]
    others = [d for d in judgement.deltas if d.figure not in GRAPH_FIGURES]
    lines = []
    if judgement.deltas:
        shown = f"; then the {MAX_DELTAS} biggest of {len(others)} other changes" if len(others) > MAX_DELTAS else ""
        lines += ["", f"**Compile-ledger changes** (graph breaks and recompiles first, every one{shown})", "",
                  "| test | figure | base | head | change |", "|---|---|---:|---:|---:|"]
        lines += [_delta_row(d) for d in graphs[:MAX_GRAPH_ROWS] + others[:MAX_DELTAS]]
        if len(graphs) > MAX_GRAPH_ROWS:
            lines.append(f"| … and {len(graphs) - MAX_GRAPH_ROWS} more graph-break and recompile changes | | | | |")
    budgeted = {(v.nodeid, v.figure) for v in judgement.violations}
    reasons = [(d, reason) for d in graphs if (d.nodeid, d.figure) not in budgeted for reason in d.reasons]
    if reasons:
        lines += ["", "New graph-break and recompile reasons:", ""]
        lines += [f"- {_test_link(d.nodeid, test_url)} ({FIGURE_NAMES[d.figure]}): {_said(reason)}"
                  for d, reason in reasons[:MAX_LISTED]]
        lines += _more(len(reasons))
    if judgement.deltas or judgement.uncompared_times:
        lines += ["", _time_note(judgement)]
    return lines


def _time_note(judgement: Judgement) -> str:
    note = (f"Compile times are compared like for like only (base and head both cold or both warm from the FX-graph "
            f"cache); a change under {TIME_FLOOR_S:g} s or ×{TIME_FLOOR_RATIO:g} is noise and not listed. "
            "Kernels and code size are listed only where the generated code differs from the base's.")
    if judgement.uncompared_times:
        pairs = sorted(judgement.uncompared_times.items(), key=lambda item: (-item[1], item[0]))
        said = ", ".join(f"{n} (base {base}, head {head})" for (base, head), n in pairs)
        total = sum(judgement.uncompared_times.values())
        note += f" Compile time not compared for {total} test{'s' if total != 1 else ''}: {said}."
    return note


def _listed(title: str, tests: list[TestJudgement], test_url: Callable[[str], str]) -> list[str]:
    if not tests:
        return []
    lines = ["", f"**{title}**", ""]
    for t in tests[:MAX_LISTED]:
        # The detail is ours around the job's words (dynamo's reasons): prose; the job's own message is code.
        said = _said(t.detail) if t.detail else code_span(_first_line(t.message), limit=400) if t.message else ""
        unbased = " (no base result)" if t.verdict == Verdict.FAILED else ""
        elsewhere = f" — {_said(t.also_failing)}" if t.also_failing else ""
        culprit = f" — {culprit_line(t)}" if t.culprit is not None else ""
        lines.append(f"- {_test_link(t.nodeid, test_url)}{unbased}" + (f": {said}" if said else "") + elsewhere
                     + culprit)
    return lines + _more(len(tests))


def culprit_line(t: TestJudgement) -> str:
    """The test's bisection in one line of markdown ("" without one), upstream said against the base's outcome."""
    if t.culprit is None:
        return ""
    at_base = True if t.verdict == Verdict.FAILING_AT_BASE else False if t.verdict == Verdict.NEW_FAILURE else None
    return bisection.markdown(t.culprit, at_base)


def _more(n: int) -> list[str]:
    return [f"- … and {n - MAX_LISTED} more"] if n > MAX_LISTED else []


def _delta_row(d: Delta) -> str:
    fmt = "{:.3f}" if d.figure in TIME_FIGURES else "{:g}"
    figure = FIGURE_NAMES[d.figure] + (f", both {d.cache}" if d.cache else "")
    return (f"| {code_span(d.nodeid, table=True, limit=400)} | {figure} | {fmt.format(d.base)} "
            f"| {fmt.format(d.head)} | {d.change} |")


def _first_line(message: str) -> str:
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    return lines[0] if lines else ""


def _said(text: str) -> str:
    return plain(shorten(text, 400), inline=True)


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
