"""Pushes to the default branch: the baseline every pull request is later compared against."""

from __future__ import annotations

import re

from service.intake.handlers.deps import HandlerDeps, repository_of
from service.intake.router import Event, Outcome, Router, field
from service.store import NewRun

router = Router()
NULL_SHA = "0" * 40
SHA = re.compile(r"[0-9a-f]{40}")


@router.register("push")
def default_branch_pushed(event: Event, deps: HandlerDeps) -> Outcome:
    payload = event.payload
    ref = field(payload, "ref", str)
    default_branch = field(payload, "repository.default_branch", str)
    after = field(payload, "after", str)
    if ref != f"refs/heads/{default_branch}":
        return Outcome(f"push to {ref}: only the default branch ({default_branch}) is checked")
    if payload.get("deleted") or after == NULL_SHA:
        return Outcome("branch deleted: nothing to check")
    new = NewRun(
        **repository_of(payload),
        trigger="push",
        trigger_ref=ref,
        pr_number=None,
        branch=default_branch,
        head_sha=after,
        sender=field(payload, "sender.login", str),
        before_sha=_sha(payload.get("before")),  # the push whose results it may reuse (service/planning/)
    )
    run = deps.start_run(new)
    return Outcome(f"run {run.id} for {new.repo_full_name}@{default_branch} at {after[:12]}", run.id)


def _sha(value: object) -> str:
    """The previous tip, when it is a commit (not a new branch's null sha, nor anything else)."""
    return value if isinstance(value, str) and SHA.fullmatch(value) and value != NULL_SHA else ""
