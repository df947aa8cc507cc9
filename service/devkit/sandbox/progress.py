"""What the sandbox says while it runs: a line per change of a check run, and of a base run's job (those report
nothing to GitHub, so without these lines minutes of work at the base commit would be silence), and where to look."""

from __future__ import annotations

import time
from typing import Any

from service.store import Job, Store

BASE_TRIGGER = "base"


class Progress:
    """One line per change of a check run (status, conclusion or title) or of a base run's job."""

    def __init__(self, pulls: dict[str, int], started: float, store: Store | None = None) -> None:
        self.pulls = pulls
        self.started = started
        self.store = store
        self.seen: dict[int | str, tuple[str, str, str]] = {}

    def _line(self, key: int | str, where: str, now: tuple[str, str, str]) -> None:
        if self.seen.get(key) == now:
            return
        self.seen[key] = now
        print(f"  [{time.monotonic() - self.started:4.0f} s] {where} {now[1] or now[0]:<11} {now[2]}", flush=True)

    def show(self, check_runs: list[dict[str, Any]]) -> None:
        for run in sorted(check_runs, key=lambda r: r["id"]):
            now = (run["status"], run["conclusion"] or "", run["output"].get("title") or "")
            self._line(run["id"], f"{'PR #' + str(self.pulls.get(run['head_sha'], '?')):<12} {run['name']:<22}", now)
        self.show_base_runs()

    def show_base_runs(self) -> None:
        if self.store is None:
            return
        try:
            runs = [run for run in self.store.recent_runs(50) if run.trigger == BASE_TRIGGER]
            jobs = [(run, job) for run in runs for job in self.store.jobs_of(run.id)]
            users = {run.id: sorted(f"#{r.pr_number}" for r in self.store.runs_based_on(run.id)) for run in runs}
        except Exception:  # noqa: BLE001 - a read that raced a worker's write: shown at the next poll
            return
        for run, job in sorted(jobs, key=lambda pair: pair[1].id):
            where = f"{'base ' + run.head_sha[:7]:<12} {job.suite + ' (' + job.device + ')':<22}"
            self._line(job.id, where, (job.state, job.conclusion or "", _doing(job, users.get(run.id, []))))


def _doing(job: Job, pulls: list[str]) -> str:
    if job.state == "queued":
        return "Queued: the base commit, for the comparison" + (f" of PR {', '.join(pulls)}" if pulls else "")
    if job.state == "running":
        if job.progress_total:
            return f"Running: {job.progress_done} / {job.progress_total} tests"
        return "Running"
    return job.title


def where_to_look(web_url: str, emulator_url: str, repos: tuple[str, ...]) -> list[str]:
    """The places a maintainer would look on GitHub, in the sandbox: the pages, the check runs, the comments."""
    lines = [f"  job pages (the check runs' Details links)  {web_url}/"]
    lines += [f"  check runs as the App wrote them (JSON)   {emulator_url}/_emulator/check-runs?repository={repo}"
              for repo in repos]
    lines.append(f"  pull request comments (markdown, JSON)    {emulator_url}/_emulator/comments")
    return lines


def comments_of(comments: list[dict[str, Any]], repo: str, max_lines: int = 30) -> list[str]:
    """Each pull request's comment from compile-ci, as its markdown (what GitHub renders), cut after `max_lines`."""
    out: list[str] = []
    for comment in sorted((c for c in comments if c.get("repository") == repo), key=lambda c: c["issue_number"]):
        body = str(comment.get("body") or "").splitlines()
        out.append(f"PR #{comment['issue_number']}, compile-ci's comment ({len(body)} lines of markdown):")
        out += [f"    {line}" for line in body[:max_lines]]
        if len(body) > max_lines:
            out.append(f"    … ({len(body) - max_lines} more lines)")
    return out
