"""The sticky pull-request comment's text: every check run of the head against its base, in one place (pure)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from service.compare.job_verdict import JobVerdict
from service.compare.judgement import BaseStatus, Judgement
from service.compare.summary import culprit_line
from service.compare.verdicts import Verdict
from service.github.markdown import code_span, link, plain, shorten

MARKER = "<!-- compile-ci: the head's check runs against the base -->"
MAX_LINES = 15  # per list
PENDING_NOTE = "this comment is updated when it finishes"  # while a check waits for its base's results
ICONS = {"success": "✅", "failure": "❌", "neutral": "⚪", "cancelled": "⏹", "timed_out": "⏱"}


@dataclass(frozen=True)
class CheckSummary:
    name: str
    verdict: JobVerdict  # the check run's own verdict: the table says what GitHub's checks say
    url: str  # the job page
    judgement: Judgement | None
    test_url: Callable[[str], str]

    @property
    def conclusion(self) -> str:
        return self.verdict.conclusion


def worth_a_comment(checks: list[CheckSummary]) -> bool:
    """Anything but all green and unchanged."""
    return any(c.conclusion != "success" or (c.judgement is not None and c.judgement.noteworthy) for c in checks)


def render_comment(head_sha: str, base_sha: str | None, checks: list[CheckSummary]) -> str:
    against = f" against its base {code_span(base_sha[:12])}" if base_sha else ""
    lines = [MARKER, f"### compile-ci: {code_span(head_sha[:12])}{against}", "",
             "| check | verdict | new failures | failing at base | flaky | budget violations | code changed |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for c in checks:
        j = c.judgement if c.judgement is not None and c.judgement.base.status == BaseStatus.READY else None
        figures = [*c.verdict.figures, len(j.code_changed)] if j and c.verdict.judged else ["–"] * 5
        icon = ICONS.get(c.conclusion, "")
        lines.append(f"| {link(plain(c.name, inline=True), c.url)} | {icon} {plain(c.verdict.title, inline=True)} | "
                     + " | ".join(map(str, figures)) + " |")
    # A check that did not run (neutral: no runner, no tests) waits for no base and needs none.
    waiting = [plain(c.name, inline=True) for c in checks if c.judgement is not None and _ran(c)
               and c.judgement.base.status == BaseStatus.PENDING]
    unusable = [plain(c.name, inline=True) for c in checks if c.judgement is not None and _ran(c)
                and c.judgement.base.status in (BaseStatus.BROKEN, BaseStatus.NONE)]
    if waiting:
        lines += ["", f"Base still running for {', '.join(waiting)}: {PENDING_NOTE}."]
    reused = [f"{plain(c.name, inline=True)} {c.verdict.not_affected} from {link('the base job', c.judgement.base.url)}"
              for c in checks if c.verdict.not_affected and c.judgement is not None and c.judgement.base.url]
    if reused:
        lines += ["", f"Reused, not run (nothing they depend on changed since the base): {'; '.join(reused)}."]
    if unusable:
        lines += ["", f"No usable base result for {', '.join(unusable)}: judged as without a base."]
    for title, pick in (
        ("New failures", lambda j: [(t.nodeid, t.also_failing, culprit_line(t))
                                    for t in j.of(Verdict.NEW_FAILURE, Verdict.FAILED)]),
        # One entry per test, as the table counts them; a test over two limits says both.
        ("Budget violations", lambda j: [(t.nodeid, "; ".join(v.describe() for v in t.violations))
                                         for t in j.tests if t.violations]),
        ("Flaky", lambda j: [(t.nodeid, t.detail) for t in j.of(Verdict.FLAKY, Verdict.KNOWN_FLAKY)]),
        ("Failing at the base too", lambda j: [(t.nodeid, "") for t in j.of(Verdict.FAILING_AT_BASE)]),
        ("Generated code changed", lambda j: [(t.nodeid, "") for t in j.code_changed]),
    ):
        lines += _section(title, checks, pick)
    return "\n".join(lines)


def _ran(c: CheckSummary) -> bool:
    """Not a check that never ran its tests (neutral); an advisory torch's judged check is neutral but ran."""
    return c.conclusion != "neutral" or c.verdict.advisory


def _section(title: str, checks: list[CheckSummary],
             pick: Callable[[Judgement], list[tuple[str, ...]]]) -> list[str]:
    """`pick`: (node id, what is said of it[, markdown already made inert: a bisection's line]) per test."""
    # Only checks whose verdict is judged: a row that shows "–" (a timed-out job, say) lists nothing below.
    entries = [(c, nodeid, said, made[0] if made else "") for c in checks if c.verdict.judged
               and c.judgement is not None and c.judgement.base.status == BaseStatus.READY
               for nodeid, said, *made in pick(c.judgement)]
    if not entries:
        return []
    lines = ["", f"**{title}** ({len(entries)})", ""]
    for c, nodeid, said, made in entries[:MAX_LINES]:
        # What is said is ours around the job's words (dynamo's reasons): prose, with the job's words made inert.
        text = plain(shorten(said, 300), inline=True)
        lines.append(f"- {plain(c.name, inline=True)}: {link(code_span(nodeid, limit=400), c.test_url(nodeid))}"
                     + (f" — {text}" if text else "") + (f" — {made}" if made else ""))
    if len(entries) > MAX_LINES:
        lines.append(f"- … and {len(entries) - MAX_LINES} more")
    return lines
