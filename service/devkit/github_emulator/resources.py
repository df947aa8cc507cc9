"""Response bodies built from the spec's own examples, with the fields that matter set from emulator state."""

from __future__ import annotations

import base64
from typing import Any

from .state import ROLE_TO_PERMISSION, EmulatorState, Pull, Repo, Token, iso, utc_now


def node_id(kind: str, number: int) -> str:
    return base64.b64encode(f"{kind}{number}".encode()).decode()


def _replace_in_strings(node: Any, old: str, new: str) -> Any:
    if isinstance(node, str):
        return node.replace(old, new)
    if isinstance(node, list):
        return [_replace_in_strings(item, old, new) for item in node]
    if isinstance(node, dict):
        return {key: _replace_in_strings(value, old, new) for key, value in node.items()}
    return node


def user(state: EmulatorState, login: str, *, kind: str = "User") -> dict[str, Any]:
    template = state.example("issue-comment")["user"]
    out: dict[str, Any] = _replace_in_strings(template, "/octocat", f"/{login}")
    user_id = 5000 + sum(map(ord, login))
    out.update(login=login, id=user_id, node_id=node_id("User", user_id), type=kind, site_admin=False)
    return out


def app_user(state: EmulatorState) -> dict[str, Any]:
    return user(state, f"{state.app_slug}[bot]", kind="Bot")


def app(state: EmulatorState) -> dict[str, Any]:
    out: dict[str, Any] = state.example("integration")
    out.update(id=state.app_id, slug=state.app_slug, name=state.app_slug, node_id=node_id("App", state.app_id),
               html_url=f"{state.base_url}/apps/{state.app_slug}")
    return out


def repository(state: EmulatorState, repo: Repo) -> dict[str, Any]:
    owner = repo.full_name.split("/")[0]
    out: dict[str, Any] = _replace_in_strings(state.example("full-repository-default-response"),
                                              "octocat/Hello-World", repo.full_name)
    # The example's fork parents and template do not validate against the schema, and we have no forks.
    for optional in ("source", "parent", "template_repository", "organization"):
        out.pop(optional, None)
    out.update(id=repo.id, node_id=node_id("Repository", repo.id), name=repo.full_name.split("/")[1],
               full_name=repo.full_name, owner=user(state, owner), private=repo.private,
               visibility="private" if repo.private else "public", default_branch=repo.default_branch,
               url=f"{state.base_url}/repos/{repo.full_name}", language="Python")
    return out


def installation(state: EmulatorState, installation_id: int) -> dict[str, Any]:
    repos = sorted(state.installations.get(installation_id, ()))
    owner = repos[0].split("/")[0] if repos else "octo"
    out: dict[str, Any] = state.example("installation")
    out.update(id=installation_id, app_id=state.app_id, app_slug=state.app_slug, repository_selection="selected",
               account=user(state, owner), target_type="User",
               access_tokens_url=f"{state.base_url}/app/installations/{installation_id}/access_tokens")
    return out


def installation_token(state: EmulatorState, token: Token) -> dict[str, Any]:
    out: dict[str, Any] = state.example("installation-token")
    # The example lists full repository objects; the field is optional and we do not model them.
    out.pop("repositories", None)
    out.update(token=token.token, expires_at=iso(token.expires_at), permissions=token.permissions,
               repository_selection="selected")
    return out


def pull_request(state: EmulatorState, pull: Pull) -> dict[str, Any]:
    out: dict[str, Any] = _replace_in_strings(state.example("pull-request"), "octocat/Hello-World", pull.full_name)
    out = _replace_in_strings(out, "/1347", f"/{pull.number}")
    repo = state.repos[pull.full_name]
    base_repo = repository(state, repo)
    head_repo = repository(state, state.repos.get(pull.head_full_name, Repo(pull.head_full_name, repo.id + 1)))
    out.update(number=pull.number, id=pull.number, node_id=node_id("PullRequest", pull.number), state=pull.state,
               title=pull.title, user=user(state, pull.author_login), author_association=pull.author_association,
               requested_teams=[], requested_reviewers=[], draft=False, merged=False, merged_by=None,
               url=f"{state.base_url}/repos/{pull.full_name}/pulls/{pull.number}", changed_files=len(pull.files))
    out["head"].update(ref=pull.head_ref, sha=pull.head_sha, repo=head_repo, user=head_repo["owner"],
                       label=f"{pull.head_full_name.split('/')[0]}:{pull.head_ref}")
    out["base"].update(ref=pull.base_ref, repo=base_repo, user=base_repo["owner"],
                       label=f"{pull.full_name.split('/')[0]}:{pull.base_ref}")
    return out


def pull_files(state: EmulatorState, pull: Pull) -> list[dict[str, Any]]:
    template = state.example("diff-entry-items")[0]
    return [{**template, "filename": name, "sha": f"{index:040x}"} for index, name in enumerate(pull.files, 1)]


def issue_comment(state: EmulatorState, full_name: str, number: int, comment_id: int, body: str) -> dict[str, Any]:
    out: dict[str, Any] = state.example("issue-comment")
    stamp = iso(utc_now())
    out.update(id=comment_id, node_id=node_id("IssueComment", comment_id), body=body, user=app_user(state),
               url=f"{state.base_url}/repos/{full_name}/issues/comments/{comment_id}",
               html_url=f"{state.base_url}/{full_name}/issues/{number}#issuecomment-{comment_id}",
               issue_url=f"{state.base_url}/repos/{full_name}/issues/{number}", author_association="NONE",
               created_at=stamp, updated_at=stamp)
    return out


def reaction(state: EmulatorState, reaction_id: int, content: str) -> dict[str, Any]:
    out: dict[str, Any] = state.example("reaction")
    out.update(id=reaction_id, node_id=node_id("Reaction", reaction_id), content=content, user=app_user(state),
               created_at=iso(utc_now()))
    return out


def collaborator_permission(state: EmulatorState, full_name: str, login: str) -> dict[str, Any]:
    role = state.role_of(full_name, login)
    out: dict[str, Any] = state.example(
        "repository-collaborator-permission-response-if-user-has-admin-permissions")
    # The schema's `collaborator` user requires role_name, which the example omits.
    out.update(permission=ROLE_TO_PERMISSION[role], role_name=role, user={**user(state, login), "role_name": role})
    return out


def commit_status(state: EmulatorState, full_name: str, sha: str, status_id: int, body: dict[str, Any]
                  ) -> dict[str, Any]:
    out: dict[str, Any] = state.example("status")
    stamp = iso(utc_now())
    out.update(id=status_id, node_id=node_id("Status", status_id), state=body["state"],
               description=body.get("description"), target_url=body.get("target_url"),
               context=body.get("context", "default"), url=f"{state.base_url}/repos/{full_name}/statuses/{sha}",
               creator=app_user(state), created_at=stamp, updated_at=stamp)
    return out


def check_suite(state: EmulatorState, suite_id: int) -> dict[str, Any]:
    suite = state.suites[suite_id]
    runs = [r.run for r in state.check_runs.values() if r.run["check_suite"]["id"] == suite_id]
    out: dict[str, Any] = state.example("check-suite")
    out.update(id=suite.id, node_id=node_id("CheckSuite", suite.id), head_sha=suite.head_sha, after=suite.head_sha,
               status="completed" if runs and all(r["status"] == "completed" for r in runs) else "queued",
               conclusion=None, app=app(state), latest_check_runs_count=len(runs), pull_requests=[],
               url=f"{state.base_url}/repos/{suite.full_name}/check-suites/{suite.id}",
               check_runs_url=f"{state.base_url}/repos/{suite.full_name}/check-suites/{suite.id}/check-runs")
    out["head_commit"]["id"] = suite.head_sha
    repo = repository(state, state.repos[suite.full_name])
    out["repository"].update({key: repo[key] for key in ("id", "node_id", "name", "full_name", "owner", "private",
                                                          "url", "html_url")})
    return out


def rate_limit(state: EmulatorState) -> dict[str, Any]:
    out: dict[str, Any] = state.example("rate-limit-overview")
    reset = int(utc_now().timestamp()) + 3600
    for bucket in [*out["resources"].values(), out["rate"]]:
        bucket["reset"] = reset
    return out
