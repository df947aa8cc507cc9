"""Check-run rendering: a job's state and results -> what GitHub shows (pure, with GitHub's limits)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from service.store import Job, Run, TestResult

MAX_TEXT = 65_535
MAX_LISTED_FAILURES = 20


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
    annotations: list[dict[str, Any]] = field(default_factory=list)

    def output(self) -> dict[str, Any]:
        out: dict[str, Any] = {"title": self.title, "summary": self.summary}
        if self.text:
            out["text"] = self.text
        if self.annotations:
            out["annotations"] = self.annotations
        return out


def truncate(text: str, limit: int, link: str) -> str:
    """Cut `text` to fit `limit` characters, ending with a pointer to the full version."""
    if len(text) <= limit:
        return text
    tail = f"\n\n… truncated; the full text is at {link}"
    return text[: limit - len(tail)] + tail


def render_check_run(run: Run, job: Job, results: Sequence[TestResult], job_url: str) -> CheckRunView:
    base = {"name": job.check_name, "head_sha": run.head_sha, "external_id": job.id, "details_url": job_url}
    if job.state == "queued":
        return CheckRunView(status="queued", title="Queued", summary=f"Waiting for a {job.device} runner.", **base)
    if job.state == "running":
        summary = f"Running `{job.suite}` on {job.device} (attempt {job.attempt}). [Live log]({job_url})"
        return CheckRunView(status="in_progress", title="Running", summary=summary, **base)
    failures = [r for r in results if r.outcome in ("failed", "error")]
    summary = _summary(job, failures, job_url)
    text = truncate(_failure_text(failures), MAX_TEXT - 1, job_url + "/log")
    return CheckRunView(
        status="completed", conclusion=job.conclusion or "neutral", title=job.title or _title(job),
        summary=truncate(summary, MAX_TEXT - 1, job_url), text=text, **base,
    )


def _title(job: Job) -> str:
    parts = [f"{job.passed} passed", f"{job.failed + job.errors} failed", f"{job.skipped} skipped"]
    return ", ".join(parts)


def _summary(job: Job, failures: Sequence[TestResult], job_url: str) -> str:
    duration = f"{job.duration_s:.1f} s" if job.duration_s is not None else "–"
    lines = []
    if job.detail:
        lines += [job.detail, ""]
    lines += [
        "| suite | device | passed | failed | skipped | duration | torch | runner |",
        "|---|---|---:|---:|---:|---:|---|---|",
        f"| {job.suite} | {job.device} | {job.passed} | {job.failed + job.errors} | {job.skipped} | {duration} "
        f"| {job.torch_version or '–'} | {job.runner or '–'} |",
    ]
    if failures:
        lines += ["", "**Failing tests**", ""]
        lines += [f"- `{r.nodeid}`: {_first_line(r.message)}" for r in failures[:MAX_LISTED_FAILURES]]
        if len(failures) > MAX_LISTED_FAILURES:
            lines.append(f"- … and {len(failures) - MAX_LISTED_FAILURES} more")
    lines += ["", f"[Log, test results and generated code]({job_url})"]
    return "\n".join(lines)


def _failure_text(failures: Sequence[TestResult]) -> str:
    blocks = [f"### {r.nodeid}\n\n```\n{(r.details or r.message).strip()[:8000]}\n```" for r in failures]
    return "\n\n".join(blocks)


def _first_line(message: str) -> str:
    line = message.strip().splitlines()[0] if message.strip() else "failed"
    return line[:200].replace("|", "\\|")
