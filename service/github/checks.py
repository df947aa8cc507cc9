"""Check-run rendering: a job's state and results -> what GitHub shows (pure, with GitHub's limits)."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from service.compare import bisection
from service.compare.bisection import Bisection
from service.compare.job_verdict import JobVerdict, job_verdict, reused_verdict
from service.compare.judgement import BaseStatus, Judgement
from service.compare.summary import annotation_level, render_section, violation_annotations
from service.compare.verdicts import Verdict
from service.github.annotations import MAX_ANNOTATIONS, annotation
from service.github.markdown import code_block, code_span, fit, inert_markdown, plain, plain_title, shorten
from service.store import APPROVAL_SUITE, Job, Run, TestResult
from suites.naming import sanitise_nodeid

MAX_TEXT = 65_535  # GitHub: summary and text "exceed a maximum bytesize of 65535" (bytes, not characters)
MAX_DETAIL = 20_000  # a job's detail (pip's lines, a config's problems) leaves room for the results below it
MAX_DETAILS = 8_000  # per failing test in the text
MAX_LISTED_FAILURES = 20
RERUN_ACTION = {"label": "Re-run", "description": "Run this job again", "identifier": "rerun"}
RERUN_CONCLUSIONS = ("failure", "timed_out", "cancelled")


@dataclass(frozen=True)
class CheckRunView:
    name: str
    head_sha: str
    external_id: str
    details_url: str
    status: str  # queued | in_progress | completed
    title: str
    summary: str
    conclusion: str | None = None
    text: str = ""
    # Every annotation of the job; the reporter sends them 50 per request (GitHub appends them).
    annotations: list[dict[str, Any]] = field(default_factory=list)
    actions: list[dict[str, str]] = field(default_factory=list)

    def output(self, annotations: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
        out: dict[str, Any] = {"title": self.title, "summary": self.summary}
        if self.text:
            out["text"] = self.text
        if annotations:
            out["annotations"] = list(annotations)
        return out

    @property
    def digest(self) -> str:
        """What GitHub shows of this view, so an identical report is not sent twice."""
        shown = "\0".join([self.status, self.conclusion or "", self.title, self.summary, self.text])
        return hashlib.sha256(shown.encode()).hexdigest()


def truncate(text: str, limit: int, link: str) -> str:
    """Cut Markdown `text` to fit `limit` bytes, leaving no code open, ending with a pointer to the full version."""
    return fit(text, limit, f"\n\n… truncated; the full text is at {link}")


def render_check_run(run: Run, job: Job, results: Sequence[TestResult], job_url: str,
                     judgement: Judgement | None = None,
                     culprits: Mapping[str, Bisection] | None = None) -> CheckRunView:
    """`culprits`: the failing tests' bisections (service/compare/bisection.py), one line each in the text."""
    base = {"name": job.check_name, "head_sha": run.head_sha, "external_id": job.external_id,
            "details_url": job_url}
    if job.state == "queued":
        said = f"\n\n{truncate(inert_markdown(job.detail), MAX_DETAIL, job_url)}" if job.detail else ""
        return CheckRunView(status="queued", title=plain_title(job.title or "Queued"),
                            summary=f"Waiting for a {job.device} runner.{said}", **base)
    if job.state == "running":
        return CheckRunView(status="in_progress", title=_progress_title(job), summary=_progress(job, job_url),
                            **base)
    if job.suite == APPROVAL_SUITE:
        return CheckRunView(status="completed", conclusion=job.conclusion or "action_required",
                            title=plain_title(job.title),
                            summary=truncate(inert_markdown(job.detail), MAX_TEXT, job_url), **base)
    # A test not affected by the pull request carries its base's outcome: not this job's failure.
    failures = [r for r in results if r.outcome in ("failed", "error") and not getattr(r, "not_affected", False)]
    summary = _summary(job, failures, job_url)
    verdicts = {t.nodeid: t.verdict for t in judgement.tests} if judgement is not None else {}
    if judgement is not None:
        summary = summary + "\n" + render_section(judgement, lambda nodeid: test_url(job_url, nodeid))
    text = truncate(_failure_text(failures, culprits or {}, verdicts), MAX_TEXT, job_url + "/log")
    verdict = verdict_of(job, judgement)
    if judgement is None:  # a push: what it reused counts as its own (service/compare/job_verdict.py)
        verdict = reused_verdict(verdict, [(r.outcome, r.reused_from) for r in results if r.not_affected])
    conclusion = verdict.conclusion
    if job.torch_advisory:
        summary = f"{ADVISORY_NOTE.format(torch=job.torch)}\n\n{summary}"
    notes = [_annotation(job, r, annotation_level(verdicts.get(r.nodeid, Verdict.FAILED))) for r in failures]
    if judgement is not None and judgement.base.status == BaseStatus.READY:
        located = {r.nodeid: (r.file or r.nodeid.split("::")[0], r.line) for r in results}
        notes += [_annotation(job, r, "notice") for r in results if verdicts.get(r.nodeid) == Verdict.FLAKY]
        notes += violation_annotations(judgement, lambda n: located.get(n, (n.split("::")[0], None)), job.check_name)
    return CheckRunView(
        status="completed", conclusion=conclusion,
        title=plain_title(verdict.title),
        summary=truncate(summary, MAX_TEXT, job_url), text=text, **base,
        annotations=[_advisory_level(job, note) for note in notes[:MAX_ANNOTATIONS]],
        actions=[RERUN_ACTION] if conclusion in RERUN_CONCLUSIONS or verdict.advisory else [],
    )


ADVISORY_NOTE = ("**torch {torch} is advisory on this deployment** (the next release, say): what fails on it is "
                 "listed here and never turns the pull request red.")


def verdict_of(job: Job, judgement: Judgement | None) -> JobVerdict:
    """The job's one verdict (service/compare/job_verdict.py): what its check run, the comment and the pages say."""
    return job_verdict(job.conclusion or "neutral", job.title, _title(job), judgement, bool(job.torch_advisory))


def _advisory_level(job: Job, note: dict[str, Any]) -> dict[str, Any]:
    """An advisory version's failures are warnings: a failure annotation would read as blocking."""
    blocking = job.torch_advisory and note.get("annotation_level") == "failure"
    return {**note, "annotation_level": "warning"} if blocking else note


def check_conclusion(job: Job, judgement: Judgement | None) -> str:
    """The completed check run's conclusion: the job's, unless its tests are judged against a base."""
    return verdict_of(job, judgement).conclusion


def test_url(job_url: str, nodeid: str) -> str:
    """The test's page (generated code, metrics, the diff against the base) under the check run's own attempt."""
    return f"{job_url}/tests/{sanitise_nodeid(nodeid)}"


def _progress_title(job: Job) -> str:
    if job.progress_total:
        return f"Running: {job.progress_done} / {job.progress_total} tests"
    return "Running"


def _progress(job: Job, job_url: str) -> str:
    shards = f", as {job.shards} shards" if (job.shards or 1) > 1 else ""
    lines = [f"Running `{job.suite}` on {job.device} (attempt {job.attempt}{shards})."]
    if job.progress_total:
        lines.append(f"{job.progress_done} of {job.progress_total} tests done.")
    if job.progress_current:
        lines.append(f"Now running {code_span(job.progress_current, limit=300)}.")
    lines.append(f"[Live log]({job_url})")
    return "\n\n".join(lines)


def _annotation(job: Job, result: TestResult, level: str = "failure") -> dict[str, Any]:
    """At the failing line of the repository's code when the traceback reaches it, else at the test."""
    message = f"{result.nodeid}: {_first_line(result.message)}"
    details = (result.details or result.message).strip()
    if result.repo_path:
        # At the user's code (shown in "Files changed"); the suite's test, which GitHub cannot show, is named here.
        test_at = f" (test at {result.file}:{result.line})" if result.file and result.line else ""
        return annotation(result.repo_path, result.repo_line, f"{job.check_name} failed here",
                          message + test_at, details, level)
    path = result.file or result.nodeid.split("::")[0]
    return annotation(path, result.line, f"{job.check_name}: {result.nodeid}", message, details, level)


def _title(job: Job) -> str:
    return summary_line({k: getattr(job, k) or 0 for k in COUNTED})


# pytest's words and order ("2 failed, 86 passed, 11 skipped, 1 xfailed, 1 xpassed, 1 error").
COUNTED = ("failed", "passed", "skipped", "xfailed", "xpassed", "errors")


def count_outcomes(outcomes: Iterable[str]) -> dict[str, int]:
    """Per-test outcomes (as stored) -> the counts a job keeps: `error` is counted as `errors`."""
    tally = Counter("errors" if outcome == "error" else outcome for outcome in outcomes)
    return {key: tally.get(key, 0) for key in COUNTED}


def summary_line(counts: dict[str, int]) -> str:
    parts = []
    for key in COUNTED:
        n = counts.get(key, 0)
        if n:
            parts.append(f"{n} {'error' if key == 'errors' and n == 1 else key}")
    return ", ".join(parts) or "no tests"


def _summary(job: Job, failures: Sequence[TestResult], job_url: str) -> str:
    duration = f"{job.duration_s:.1f} s" if job.duration_s is not None else "–"
    lines = []
    if job.detail:  # our words around the job's (pip's lines, a config's values): code kept as code, the rest plain
        lines += [truncate(inert_markdown(job.detail), MAX_DETAIL, job_url), ""]
    lines += [
        "| suite | device | passed | failed | errors | skipped | xfailed | xpassed | duration | torch | runner |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
        f"| {job.suite} | {job.device} | {job.passed} | {job.failed} | {job.errors} | {job.skipped} "
        f"| {job.xfailed or 0} | {job.xpassed or 0} | {duration} | {plain(job.torch_version or '–', inline=True)} "
        f"| {plain(job.runner or '–', inline=True)} |",
    ]
    if failures:
        lines += ["", "**Failing tests**", ""]
        lines += [f"- {code_span(r.nodeid, limit=500)}: {code_span(_first_line(r.message))}"
                  for r in failures[:MAX_LISTED_FAILURES]]
        if len(failures) > MAX_LISTED_FAILURES:
            lines.append(f"- … and {len(failures) - MAX_LISTED_FAILURES} more")
    lines += ["", f"[Log, test results and generated code]({job_url})"]
    return "\n".join(lines)


def _failure_text(failures: Sequence[TestResult], culprits: Mapping[str, Bisection],
                  verdicts: Mapping[str, Verdict]) -> str:
    blocks = []
    for r in failures:
        culprit, verdict = culprits.get(r.nodeid), verdicts.get(r.nodeid)
        at_base = True if verdict == Verdict.FAILING_AT_BASE else False if verdict == Verdict.NEW_FAILURE else None
        # "Bisected: wrong from …"; without a culprit the words say so themselves ("bisection flaky: …")
        line = "" if culprit is None else f"{'Bisected: ' if culprit.found else ''}" \
            f"{bisection.markdown(culprit, at_base)}\n\n"
        blocks.append(f"### {code_span(r.nodeid, limit=500)}\n\n{line}"
                      f"{code_block(r.details or r.message, limit=MAX_DETAILS)}")
    return "\n\n".join(blocks)


def _first_line(message: str) -> str:
    """The message's first line; one ending at a colon is joined with the next, which carries the figures."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    line = lines[0] if lines else "failed"
    if line.endswith(":") and len(lines) > 1:
        line = f"{line} {lines[1].removeprefix('E ').strip()}"
    return shorten(line, 200)
