"""Comments on pull requests: `/rerun`, `/ok-to-test`, `/cancel` are queued for the github worker.

The webhook only parses: checking the commenter's permission, replying and reacting call GitHub, which
happens in the `handle_comment` task. Edited and deleted comments have no handler, so they do nothing.
"""

from __future__ import annotations

from service.github.commands import parse_comment
from service.intake.handlers.deps import HandlerDeps
from service.intake.router import BadPayload, Event, Outcome, Router, field

router = Router()


@router.register("issue_comment", "created")
def comment_on_pull_request(event: Event, deps: HandlerDeps) -> Outcome:
    payload = event.payload
    issue = field(payload, "issue", dict)
    if not issue.get("pull_request"):
        return Outcome("comment on an issue, not a pull request")
    comment = field(payload, "comment", dict)
    # Bots include ourselves: our replies quote the grammar, and must never trigger it.
    if field(payload, "comment.user.type", str) == "Bot":
        return Outcome("comment by a bot")
    body = comment.get("body")
    if not isinstance(body, str | None):
        raise BadPayload("payload field comment.body has the wrong type")
    commands = parse_comment(body)
    if not commands:
        return Outcome("no commands")
    request = {
        "repo": field(payload, "repository.full_name", str),
        "repo_id": field(payload, "repository.id", int),
        "installation_id": field(payload, "installation.id", int),
        "clone_url": field(payload, "repository.clone_url", str),
        "private": bool(payload["repository"].get("private", False)),
        "number": field(payload, "issue.number", int),
        "comment_id": field(payload, "comment.id", int),
        "commenter": field(payload, "comment.user.login", str),
        "pr_author": field(payload, "issue.user.login", str),
        "pr_association": str(issue.get("author_association", "NONE")),
        "lines": [c.line for c in commands],
    }
    deps.queue.handle_comment(request)
    return Outcome(f"{len(commands)} command(s) from @{request['commenter']} queued")
