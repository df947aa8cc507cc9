"""A job's attempts as its pages show them: one per check run on GitHub (the first run and each re-run).

The job row holds the newest attempt; earlier ones come from service.store.attempts. Every job page exists at
/jobs/<id> (the newest) and /jobs/<id>/attempts/<n> (the check run's own Details link), with the same subpages.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from flask import abort

from service.store import APPROVAL_SUITE, Job, Run
from service.store.attempts import AttemptRecord, attempts_of
from service.store.rows import check_name_of, duration_between
from service.torch_versions import torch_of_job_id
from service.web.browser.lookup import load_job, wiring

MAX_ATTEMPT = 10_000


@dataclass(frozen=True)
class AttemptView:
    """What a page shows of one attempt; `attempt` names its artifact directory (0: it never ran)."""

    id: str
    run_id: str
    suite: str
    device: str
    number: int  # 1-based, the check run's place among the job's check runs
    attempt: int
    state: str
    conclusion: str | None
    title: str
    detail: str
    runner: str
    torch_version: str
    started_at: datetime | None
    finished_at: datetime | None
    newest: bool
    base: str  # the URL prefix of this attempt's pages

    @property
    def torch(self) -> str:
        """The job's torch version when not the deployment's default (its id names it)."""
        return torch_of_job_id(self.id)

    @property
    def check_name(self) -> str:
        return check_name_of(self.suite, self.device, self.torch)

    @property
    def duration_s(self) -> float | None:
        return duration_between(self.started_at, self.finished_at)

    @property
    def ran(self) -> bool:
        return self.attempt > 0


def _newest(job: Job, base: str, earlier: list[AttemptRecord]) -> AttemptView:
    # A check run cancelled in the queue (or never run) has no directory of its own: the job row's attempt
    # counter still names the previous check run's.
    taken = job.started_at is None and any(r.attempt == job.attempt for r in earlier)
    attempt = 0 if taken or job.suite == APPROVAL_SUITE else job.attempt
    # Its check run's verdict once reported (service/compare/job_verdict.py): the page says what GitHub says.
    return AttemptView(job.id, job.run_id, job.suite, job.device, job.rerun + 1, attempt, job.state,
                       job.shown_conclusion or None, job.shown_title, job.detail, job.runner, job.torch_version,
                       job.started_at, job.finished_at, True, base)


def _earlier(job: Job, record: AttemptRecord) -> AttemptView:
    return AttemptView(job.id, job.run_id, job.suite, job.device, record.rerun + 1, record.attempt, "completed",
                       record.conclusion or None, record.title, record.detail, record.runner,
                       record.torch_version, record.started_at, record.finished_at, False,
                       f"/jobs/{job.id}/attempts/{record.rerun + 1}")


def load_attempt(job_id: str, number: int | None) -> tuple[Run, AttemptView, Path, list[AttemptView]]:
    """The run, the attempt asked for (None: the newest), its artifact directory and every attempt of the job."""
    run, job, _directory = load_job(job_id)
    if number is not None and not 1 <= number <= min(job.rerun + 1, MAX_ATTEMPT):
        abort(404)
    records = [r for r in attempts_of(wiring().store, job.id) if r.rerun < job.rerun]
    newest = _newest(job, f"/jobs/{job.id}" if number is None else f"/jobs/{job.id}/attempts/{job.rerun + 1}",
                     records)
    earlier = [_earlier(job, r) for r in records]
    every = [*earlier, newest]
    chosen = newest if number is None or number == newest.number else next(
        (a for a in earlier if a.number == number), None)
    if chosen is None:  # an old check run whose record predates attempt records
        chosen = AttemptView(job.id, job.run_id, job.suite, job.device, number or 0, 0, "completed", None,
                             "No record of this attempt", "", "", "", None, None, False,
                             f"/jobs/{job.id}/attempts/{number}")
        every = sorted([*every, chosen], key=lambda a: a.number)
    directory = wiring().settings.artifacts_dir / job.run_id / job.id / str(chosen.attempt)
    return run, chosen, directory, every
