"""Pull requests: opened, pushed to, reopened or marked ready -> a run of the head commit."""

from __future__ import annotations

from service.handlers.deps import HandlerDeps
from service.router import Event, Outcome, Router, field
from service.store import NewRun

router = Router()


@router.register("pull_request", "opened", "synchronize", "reopened", "ready_for_review")
def new_commit_to_check(event: Event, deps: HandlerDeps) -> Outcome:
    payload = event.payload
    pr = field(payload, "pull_request", dict)
    if pr.get("draft") is True:
        return Outcome("draft pull request: waits until it is marked ready for review")
    new = NewRun(
        repo_full_name=field(payload, "repository.full_name", str),
        repo_id=field(payload, "repository.id", int),
        installation_id=field(payload, "installation.id", int),
        clone_url=field(payload, "repository.clone_url", str),
        private=bool(payload["repository"].get("private", False)),
        trigger="pull_request",
        trigger_ref=f"pr/{field(payload, 'number', int)}",
        pr_number=field(payload, "number", int),
        branch=field(payload, "pull_request.head.ref", str),
        head_sha=field(payload, "pull_request.head.sha", str),
        sender=field(payload, "sender.login", str),
    )
    run = deps.start_run(new)
    return Outcome(f"run {run.id} for {new.repo_full_name}#{new.pr_number} at {new.head_sha[:12]}", run.id)
