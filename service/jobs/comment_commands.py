"""Carrying out a PR comment's commands (github queue): permission, then each command, then one answer."""

from __future__ import annotations

import json
import logging
from typing import Any

from service.github.api import PullHead
from service.github.commands import GRAMMAR, Command, Invalid, parse_comment, select_jobs
from service.github.markdown import code_span, fit
from service.github.trust import author_is_trusted, may_command
from service.jobs import lifecycle
from service.jobs.context import WorkerContext
from service.jobs.job_control import approve, cancel_run, rerun_jobs
from service.jobs.lifecycle import Gate
from service.store import APPROVAL_SUITE, NewRun, Run

log = logging.getLogger(__name__)
ACCEPTED_REACTION = "+1"
MAX_REPLY = 65_000  # GitHub refuses comments over 65,536 characters; a reply quotes the commenter's lines


def handle_comment(ctx: WorkerContext, request: dict[str, Any]) -> None:
    installation, repo, number = request["installation_id"], request["repo"], request["number"]
    memo_key = f"comment:{repo}:{request['comment_id']}"
    remembered = ctx.claims.recall(memo_key)
    if remembered is None:
        accepted, problems = _carry_out(ctx, request)
        # Remembered before answering: a retry after a failed reply must not re-run the commands.
        ctx.claims.remember(memo_key, json.dumps([accepted, problems]))
    else:
        accepted, problems = json.loads(remembered)
    if accepted:
        ctx.github.react(installation, repo, number, request["comment_id"], ACCEPTED_REACTION)
    if problems:
        ctx.github.comment(installation, repo, number, reply(request["commenter"], problems, request["lines"]))


def reply(commenter: str, problems: list[str], lines: list[str]) -> str:
    """The answer to a comment with problems; the grammar only when a line was not a command we know."""
    body = "\n".join(f"- {p}" for p in problems)
    misspelt = any(isinstance(command, Invalid) for command in parse_comment("\n".join(lines)))
    grammar = f"\n\n{GRAMMAR}" if misspelt else ""
    return fit(f"@{commenter}:\n{body}", MAX_REPLY - len(grammar.encode()), "\n- … and more") + grammar


def _carry_out(ctx: WorkerContext, request: dict[str, Any]) -> tuple[bool, list[str]]:
    commands = parse_comment("\n".join(request["lines"]))
    installation, repo = request["installation_id"], request["repo"]
    role, permission = ctx.github.collaborator_access(installation, repo, request["commenter"])
    verdict = may_command(commenter=request["commenter"], role_name=role, permission=permission,
                          pr_author=request["pr_author"], pr_association=request["pr_association"])
    if not verdict.allowed:
        log.info("comment %s on %s: refused: %s", request["comment_id"], repo, verdict.reason)
        return False, [f"Not done: {verdict.reason}."]
    pull = ctx.github.pull_request(installation, repo, request["number"])
    accepted, problems = False, []
    for command in commands:
        if isinstance(command, Invalid):
            problems.append(f"{_quoted(command.line)}: {command.reason}.")
            continue
        problem = _execute(ctx, request, pull, command)
        if problem is None:
            accepted = True
        else:
            problems.append(f"{_quoted(command.line)}: {problem}")
    return accepted, problems


def _quoted(line: str) -> str:
    """The commenter's line, as code nothing in it can break out of (the App must not post their mentions)."""
    return code_span(line, limit=200)


def _execute(ctx: WorkerContext, request: dict[str, Any], pull: PullHead, command: Command) -> str | None:
    """None when done, else why not (for the reply)."""
    run, created = _run_for_head(ctx, request, pull)
    if command.verb == "ok-to-test":
        if run.gate == Gate.TRUSTED:
            return "nothing to approve: the author's pull requests run without approval."
        if not approve(ctx.store, ctx.queue, run, request["commenter"]):
            return f"{pull.head_sha[:12]} is already approved."
        return None
    if command.verb == "cancel":
        stopped = cancel_run(ctx.store, ctx.queue, run, f"Cancelled by @{request['commenter']} with `/cancel`.")
        return None if stopped else "nothing is queued or running for the head commit."
    if run.gate == Gate.WAITING:
        return f"{pull.head_sha[:12]} has not been approved yet: comment `/ok-to-test` first."
    if created:
        return None  # a run we just made runs everything anyway
    jobs = [j for j in ctx.store.jobs_of(run.id) if j.suite != APPROVAL_SUITE]
    chosen = select_jobs(command, jobs)
    if not chosen:
        names = ", ".join(sorted({j.check_name for j in jobs})) or "none yet"
        return f"no job matches (jobs of {pull.head_sha[:12]}: {names})."
    lifecycle.resume_run(ctx.store, run.id)
    reruns = rerun_jobs(ctx.store, ctx.queue, ctx.settings.devices, chosen)
    if reruns.started:
        return None
    return "; ".join(f"{job.check_name} not re-run: {reason}" for job, reason in reruns.skipped) + "."


def _run_for_head(ctx: WorkerContext, request: dict[str, Any], pull: PullHead) -> tuple[Run, bool]:
    """The run of the PR's current head; made here when no webhook made it (e.g. opened before install)."""
    new = NewRun(repo_full_name=request["repo"], repo_id=request["repo_id"],
                 installation_id=request["installation_id"], clone_url=request["clone_url"],
                 private=request["private"], trigger="pull_request", trigger_ref=f"pr/{request['number']}",
                 pr_number=request["number"], branch=pull.head_ref, head_sha=pull.head_sha,
                 sender=request["commenter"], author=pull.author,
                 gate=Gate.TRUSTED if author_is_trusted(pull.association) else Gate.WAITING)
    run, created = ctx.store.create_run_if_absent(new)
    if created:
        ctx.queue.plan_run(run.id)
    return run, created
