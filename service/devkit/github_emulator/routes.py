"""One handler per operation of the subset, keyed by operationId; each turns a validated call into a reply."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from . import checks, resources
from .state import CheckRunRecord, EmulatorState

DOCS_URL = "https://docs.github.com/rest"
# What a freshly installed CI app is granted; a token request may ask for less.
DEFAULT_PERMISSIONS = {"checks": "write", "contents": "read", "issues": "write", "metadata": "read",
                       "pull_requests": "write", "statuses": "write"}


@dataclass
class Call:
    operation_id: str
    params: dict[str, str]
    query: dict[str, str]
    body: Any

    @property
    def full_name(self) -> str:
        return f"{self.params['owner']}/{self.params['repo']}"

    def number(self, name: str) -> int:
        return int(self.params[name])


@dataclass
class Reply:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


def error_reply(status: int, message: str, errors: list[str] | None = None) -> Reply:
    """GitHub's error shape: `basic-error`, or `validation-error` with one entry per problem for 422."""
    body: dict[str, Any] = {"message": message, "documentation_url": DOCS_URL, "status": str(status)}
    if errors is not None:
        body["errors"] = [{"code": "invalid", "message": error} for error in errors]
    return Reply(status, body)


def not_found() -> Reply:
    return error_reply(404, "Not Found")


def paginate(items: list[Any], call: Call, base_url: str, path: str) -> tuple[list[Any], dict[str, str]]:
    """One page plus GitHub's `Link` header (next, last, first, prev), which PyGithub follows."""
    per_page = max(1, min(int(call.query.get("per_page", 30)), 100))
    page = max(1, int(call.query.get("page", 1)))
    last = max(1, -(-len(items) // per_page))
    rels = {"next": page + 1, "last": last} if page < last else {}
    if page > 1:
        rels |= {"first": 1, "prev": page - 1}
    links = [f'<{base_url}{path}?{urlencode({**call.query, "page": n})}>; rel="{rel}"' for rel, n in rels.items()]
    return items[(page - 1) * per_page: page * per_page], ({"Link": ", ".join(links)} if links else {})


def get_app(state: EmulatorState, call: Call) -> Reply:
    return Reply(200, resources.app(state))


def create_installation_token(state: EmulatorState, call: Call) -> Reply:
    installation_id = call.number("installation_id")
    body = call.body or {}
    with state.lock:
        installed = state.installations.get(installation_id)
        if installed is None:
            return not_found()
        names, ids = body.get("repositories", []), body.get("repository_ids", [])
        scoped = {name for name in installed if name.split("/")[1] in names or state.repos[name].id in ids}
    if len(scoped) != len(set(names)) + len(set(ids)):
        return error_reply(422, "There is at least one repository that does not exist or is not accessible to "
                                "the parent installation.")
    repos = frozenset(scoped) if "repositories" in body or "repository_ids" in body else None
    token = state.mint_token(installation_id, body.get("permissions") or DEFAULT_PERMISSIONS, repos)
    return Reply(201, resources.installation_token(state, token))


def get_repo_installation(state: EmulatorState, call: Call) -> Reply:
    installation_id = state.installation_for(call.full_name)
    return not_found() if installation_id is None else Reply(200, resources.installation(state, installation_id))


def get_repo(state: EmulatorState, call: Call) -> Reply:
    return Reply(200, resources.repository(state, state.repos[call.full_name]))


def create_check_run(state: EmulatorState, call: Call) -> Reply:
    return Reply(201, checks.create(state, call.full_name, call.body))


def _check_run(state: EmulatorState, call: Call) -> CheckRunRecord | None:
    record = state.check_runs.get(call.number("check_run_id"))
    return record if record is not None and record.full_name == call.full_name else None


def get_check_run(state: EmulatorState, call: Call) -> Reply:
    with state.lock:
        record = _check_run(state, call)
        return not_found() if record is None else Reply(200, record.public_run())


def update_check_run(state: EmulatorState, call: Call) -> Reply:
    record = _check_run(state, call)
    return not_found() if record is None else Reply(200, checks.update(state, record, call.body))


def list_check_runs_for_ref(state: EmulatorState, call: Call) -> Reply:
    runs = checks.list_for_ref(state, call.full_name, call.params["ref"], call.query)
    path = f"/repos/{call.full_name}/commits/{call.params['ref']}/check-runs"
    page, headers = paginate(runs, call, state.base_url, path)
    return Reply(200, {"total_count": len(runs), "check_runs": page}, headers)


def create_check_suite(state: EmulatorState, call: Call) -> Reply:
    suite, created = state.suite_for(call.full_name, call.body["head_sha"])
    with state.lock:
        return Reply(201 if created else 200, resources.check_suite(state, suite.id))


def rerequest_check_suite(state: EmulatorState, call: Call) -> Reply:
    with state.lock:
        suite = state.suites.get(call.number("check_suite_id"))
        if suite is None or suite.full_name != call.full_name:
            return not_found()
        suite.rerequests += 1
    return Reply(201, {})


def get_pull(state: EmulatorState, call: Call) -> Reply:
    with state.lock:
        pull = state.pulls.get((call.full_name, call.number("pull_number")))
        return not_found() if pull is None else Reply(200, resources.pull_request(state, pull))


def list_pull_files(state: EmulatorState, call: Call) -> Reply:
    pull = state.pulls.get((call.full_name, call.number("pull_number")))
    if pull is None:
        return not_found()
    path = f"/repos/{call.full_name}/pulls/{pull.number}/files"
    page, headers = paginate(resources.pull_files(state, pull), call, state.base_url, path)
    return Reply(200, page, headers)


def create_issue_comment(state: EmulatorState, call: Call) -> Reply:
    comment_id = state.next_id("comment")
    number = call.number("issue_number")
    comment = resources.issue_comment(state, call.full_name, number, comment_id, call.body["body"])
    with state.lock:
        state.comments.append({"repository": call.full_name, "issue_number": number, "id": comment_id,
                               "body": call.body["body"]})
    return Reply(201, comment, {"Location": comment["url"]})


def update_issue_comment(state: EmulatorState, call: Call) -> Reply:
    comment_id = call.number("comment_id")
    with state.lock:
        comment = next((c for c in state.comments if c["id"] == comment_id and c["repository"] == call.full_name),
                       None)
        if comment is None:
            return not_found()
        comment["body"] = call.body["body"]
        comment["edits"] = comment.get("edits", 0) + 1
        number = comment["issue_number"]
    return Reply(200, resources.issue_comment(state, call.full_name, number, comment_id, call.body["body"]))


def create_comment_reaction(state: EmulatorState, call: Call) -> Reply:
    wanted = {"repository": call.full_name, "comment_id": call.number("comment_id"), "content": call.body["content"]}
    with state.lock:
        existing = next((r for r in state.reactions if {k: r[k] for k in wanted} == wanted), None)
        # GitHub answers 200 with the reaction it already has when the same user reacts the same way twice.
        if existing is not None:
            return Reply(200, resources.reaction(state, existing["id"], existing["content"]))
        reaction_id = state.next_id("reaction")
        state.reactions.append({**wanted, "id": reaction_id})
    return Reply(201, resources.reaction(state, reaction_id, wanted["content"]))


def get_collaborator_permission(state: EmulatorState, call: Call) -> Reply:
    return Reply(200, resources.collaborator_permission(state, call.full_name, call.params["username"]))


def create_commit_status(state: EmulatorState, call: Call) -> Reply:
    status_id = state.next_id("status")
    with state.lock:
        state.statuses.append({"repository": call.full_name, "sha": call.params["sha"], "id": status_id,
                               **call.body})
    status = resources.commit_status(state, call.full_name, call.params["sha"], status_id, call.body)
    return Reply(201, status, {"Location": status["url"]})


def get_rate_limit(state: EmulatorState, call: Call) -> Reply:
    return Reply(200, resources.rate_limit(state))


Handler = Callable[[EmulatorState, Call], Reply]
ROUTES: dict[str, Handler] = {
    "apps/get-authenticated": get_app,
    "apps/create-installation-access-token": create_installation_token,
    "apps/get-repo-installation": get_repo_installation,
    "repos/get": get_repo,
    "checks/create": create_check_run,
    "checks/get": get_check_run,
    "checks/update": update_check_run,
    "checks/list-for-ref": list_check_runs_for_ref,
    "checks/create-suite": create_check_suite,
    "checks/rerequest-suite": rerequest_check_suite,
    "pulls/get": get_pull,
    "pulls/list-files": list_pull_files,
    "issues/create-comment": create_issue_comment,
    "issues/update-comment": update_issue_comment,
    "reactions/create-for-issue-comment": create_comment_reaction,
    "repos/get-collaborator-permission-level": get_collaborator_permission,
    "repos/create-commit-status": create_commit_status,
    "rate-limit/get": get_rate_limit,
}
MAX_COMMENT = 65_536


def comment_errors(body: dict[str, Any]) -> list[str]:
    too_long = len(str(body.get("body", ""))) > MAX_COMMENT
    return [f"body: is too long (maximum is {MAX_COMMENT} characters)"] if too_long else []


# Rules GitHub states in prose; checked after the schema so they can assume a well-formed body.
RULES: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "checks/create": lambda body: checks.rule_errors(body, creating=True),
    "checks/update": lambda body: checks.rule_errors(body, creating=False),
    "issues/create-comment": comment_errors,
    "issues/update-comment": comment_errors,
}
