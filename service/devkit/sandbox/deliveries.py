"""Real GitHub webhook payloads (from the shared fixtures), re-aimed at a repository and signed."""

from __future__ import annotations

import copy
import json
import os
import uuid
from functools import cache
from pathlib import Path
from typing import Any

from service.intake.signature import sign


def shared_dir() -> Path:
    """The shared fixtures: COMPILE_CI_SHARED_DIR, else `../shared` beside the repository root."""
    configured = os.environ.get("COMPILE_CI_SHARED_DIR")
    path = Path(configured) if configured else Path(__file__).resolve().parents[4] / "shared"
    if not (path / "fixtures" / "github").is_dir():
        raise FileNotFoundError(
            f"GitHub fixtures not found under {path}; set COMPILE_CI_SHARED_DIR to the folder holding fixtures/github"
        )
    return path


@cache
def _fixture_bytes(event: str, name: str) -> bytes:
    return (shared_dir() / "fixtures" / "github" / "webhooks" / event / f"{name}.json").read_bytes()


def fixture(event: str, name: str) -> dict[str, Any]:
    return copy.deepcopy(json.loads(_fixture_bytes(event, name)))


def aim_repository(
    payload: dict[str, Any], full_name: str, repo_id: int, clone_url: str, installation_id: int
) -> None:
    owner, name = full_name.split("/")
    repo = payload["repository"]
    repo.update(full_name=full_name, name=name, id=repo_id, clone_url=clone_url, private=False)
    repo["owner"]["login"] = owner
    payload["installation"] = {"id": installation_id, "node_id": f"installation-{installation_id}"}


def pull_request_event(
    action: str, *, full_name: str, repo_id: int, clone_url: str, installation_id: int, number: int,
    head_sha: str, head_ref: str, base_sha: str, base_ref: str = "main", author: str = "octocat",
    association: str = "OWNER", draft: bool = False,
) -> dict[str, Any]:
    """GitHub's own `pull_request` example for `action`, pointed at our repository and commit."""
    name = {"ready_for_review": "ready_for_review.with-installation"}.get(action, action)
    payload = fixture("pull_request", name)
    aim_repository(payload, full_name, repo_id, clone_url, installation_id)
    payload["action"] = action
    payload["number"] = number
    pr = payload["pull_request"]
    pr.update(number=number, draft=draft, author_association=association, state="open")
    pr["user"]["login"] = author
    pr["head"].update(sha=head_sha, ref=head_ref, label=f"{full_name.split('/')[0]}:{head_ref}")
    pr["base"].update(sha=base_sha, ref=base_ref)
    pr["head"]["repo"] = copy.deepcopy(payload["repository"])
    pr["base"]["repo"] = copy.deepcopy(payload["repository"])
    payload["sender"]["login"] = author
    return payload


def push_event(
    *, full_name: str, repo_id: int, clone_url: str, installation_id: int, branch: str, before: str, after: str,
) -> dict[str, Any]:
    payload = fixture("push", "with-new-branch")
    aim_repository(payload, full_name, repo_id, clone_url, installation_id)
    payload["repository"]["default_branch"] = branch
    payload.update(ref=f"refs/heads/{branch}", before=before, after=after, created=False, deleted=False)
    return payload


def signed(secret: str, event: str, payload: dict[str, Any] | bytes, delivery_id: str | None = None
           ) -> tuple[dict[str, str], bytes]:
    """Headers and body exactly as GitHub's hookshot sends them."""
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "GitHub-Hookshot/compile-ci-sandbox",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery_id or str(uuid.uuid4()),
        "X-Hub-Signature-256": sign(secret, body),
    }
    return headers, body


def issue_comment_event(
    action: str, *, full_name: str, repo_id: int, clone_url: str, installation_id: int, number: int, body: str,
    commenter: str, pr_author: str = "octocat", pr_association: str = "OWNER", comment_id: int = 1001,
    commenter_type: str = "User", on_pull_request: bool = True,
) -> dict[str, Any]:
    """GitHub's `issue_comment` example on a pull request (GitHub adds `issue.pull_request` for PR comments)."""
    name = "created.with-installation" if action == "created" else action
    payload = fixture("issue_comment", name)
    aim_repository(payload, full_name, repo_id, clone_url, installation_id)
    payload["action"] = action
    issue = payload["issue"]
    issue.update(number=number, author_association=pr_association)
    issue["user"]["login"] = pr_author
    if on_pull_request:
        base = f"https://github.com/{full_name}/pull/{number}"
        issue["pull_request"] = {"url": f"https://api.github.com/repos/{full_name}/pulls/{number}",
                                 "html_url": base, "diff_url": f"{base}.diff", "patch_url": f"{base}.patch",
                                 "merged_at": None}
    comment = payload["comment"]
    comment.update(id=comment_id, body=body)
    comment["user"].update(login=commenter, type=commenter_type)
    payload["sender"]["login"] = commenter
    return payload


def check_run_event(action: str, *, full_name: str, repo_id: int, clone_url: str, installation_id: int,
                    app_id: int, external_id: str, head_sha: str, identifier: str = "rerun") -> dict[str, Any]:
    """`check_run` rerequested / requested_action, as GitHub sends them to the app that owns the check run."""
    payload = fixture("check_run", action)
    aim_repository(payload, full_name, repo_id, clone_url, installation_id)
    payload["check_run"].update(external_id=external_id, head_sha=head_sha)
    payload["check_run"]["app"]["id"] = app_id
    if action == "requested_action":
        payload["requested_action"] = {"identifier": identifier}
    return payload


def check_suite_event(*, full_name: str, repo_id: int, clone_url: str, installation_id: int, app_id: int,
                      head_sha: str) -> dict[str, Any]:
    payload = fixture("check_suite", "rerequested")
    aim_repository(payload, full_name, repo_id, clone_url, installation_id)
    payload["check_suite"].update(head_sha=head_sha, after=head_sha)
    payload["check_suite"]["app"]["id"] = app_id
    return payload
