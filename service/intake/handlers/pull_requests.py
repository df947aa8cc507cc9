"""Pull requests: new code to check (gated on the author's trust), and older heads of the PR cancelled."""

from __future__ import annotations

from service.github.trust import author_is_trusted
from service.intake.handlers.deps import HandlerDeps, repository_of
from service.intake.router import Event, Outcome, Router, field
from service.jobs.job_control import cancel_run
from service.store import NewRun

router = Router()


@router.register("pull_request", "opened", "synchronize", "reopened", "ready_for_review")
def new_commit_to_check(event: Event, deps: HandlerDeps) -> Outcome:
    payload = event.payload
    pr = field(payload, "pull_request", dict)
    if pr.get("draft") is True:
        return Outcome("draft pull request: waits until it is marked ready for review")
    association = str(pr.get("author_association", "NONE"))
    new = NewRun(
        **repository_of(payload),
        trigger="pull_request",
        trigger_ref=f"pr/{field(payload, 'number', int)}",
        pr_number=field(payload, "number", int),
        branch=field(payload, "pull_request.head.ref", str),
        head_sha=field(payload, "pull_request.head.sha", str),
        sender=field(payload, "sender.login", str),
        author=field(payload, "pull_request.user.login", str),
        base_sha=field(payload, "pull_request.base.sha", str),  # judged against it (service/planning/base_runs.py)
        # Code from outside the project waits for a maintainer's /ok-to-test of this very commit.
        gate="trusted" if author_is_trusted(association) else "waiting",
    )
    superseded = _cancel_older_heads(deps, new)
    run = deps.start_run(new)
    gated = " (waiting for approval)" if run.gate == "waiting" else ""
    note = f"; cancelled {superseded} job(s) of older heads" if superseded else ""
    return Outcome(f"run {run.id} for {new.repo_full_name}#{new.pr_number} at {new.head_sha[:12]}{gated}{note}",
                   run.id)


def _cancel_older_heads(deps: HandlerDeps, new: NewRun) -> int:
    assert new.pr_number is not None
    stopped = 0
    for run in deps.store.runs_of_pr(new.repo_full_name, new.pr_number):
        if run.head_sha != new.head_sha and not run.cancelled_reason:
            reason = f"Superseded by a newer push ({new.head_sha[:12]})."
            stopped += len(cancel_run(deps.store, deps.queue, run, reason))
    return stopped
