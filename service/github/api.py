"""GitHub facade on PyGithub (the only module that imports it): App auth, tokens, check runs, comments."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from github import Auth, Github, GithubException, GithubIntegration, GithubRetry
from github.GithubException import RateLimitExceededException

from service.config import Settings
from service.github.checks import CheckRunView


class TransientGitHubError(RuntimeError):
    """5xx or rate limit: retry later (after `retry_after` seconds when GitHub said so)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class GoneError(RuntimeError):
    """404/422: the repository, sha or check run is gone; stop quietly."""


@dataclass(frozen=True)
class _Throttle:
    between_requests: float
    between_writes: float


class GitHubApp:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._auth = Auth.AppAuth(settings.github_app_id, settings.github_private_key.reveal())
        throttle = _Throttle(0.25, 1.0) if settings.github_throttle else _Throttle(0.0, 0.0)
        self._throttle = throttle
        self._clients: dict[int, Github] = {}
        self._lock = threading.Lock()

    def _retry(self) -> GithubRetry:
        # Only reads are retried by the transport: a POST that GitHub applied and then answered 5xx
        # would be sent twice and create a duplicate check run. Writes are retried by Celery, which
        # re-reads the store first. Rate-limit waits are never slept through inside a worker.
        return GithubRetry(total=2, allowed_methods=frozenset({"GET", "HEAD"}), max_rate_limit_wait=0)

    def client(self, installation_id: int) -> Github:
        with self._lock:
            gh = self._clients.get(installation_id)
            if gh is None:
                gh = Github(
                    auth=self._auth.get_installation_auth(installation_id),
                    base_url=self._settings.github_api_url,
                    retry=self._retry(),
                    seconds_between_requests=self._throttle.between_requests,
                    seconds_between_writes=self._throttle.between_writes,
                    lazy=True,
                )
                self._clients[installation_id] = gh
            return gh

    def installation_token(self, installation_id: int) -> str:
        """A fresh token for `git fetch`; it never reaches logs or the runner."""
        integration = GithubIntegration(auth=self._auth, base_url=self._settings.github_api_url)
        with _translated("minting an installation token"):
            return integration.get_access_token(installation_id).token

    def find_check_run(self, installation_id: int, repo: str, view: CheckRunView) -> int | None:
        """The check run already made for this view's external_id, if any.

        A create that GitHub applied but answered 5xx (or whose answer was lost) leaves a check run we do not
        know the id of; looking it up before every create is what makes the Celery retry harmless.
        """
        with _translated(f"listing check runs of {view.head_sha[:12]} on {repo}"):
            commit = self.client(installation_id).get_repo(repo).get_commit(view.head_sha)
            for check_run in commit.get_check_runs(check_name=view.name, filter="all"):
                if check_run.external_id == view.external_id:
                    return int(check_run.id)
        return None

    def create_check_run(self, installation_id: int, repo: str, view: CheckRunView,
                         annotations: Sequence[dict[str, Any]] = ()) -> int:
        fields = _fields(view, annotations)
        with _translated(f"creating check run {view.name!r} on {repo}"):
            check_run = self.client(installation_id).get_repo(repo).create_check_run(
                name=view.name, head_sha=view.head_sha, **fields
            )
        return int(check_run.id)

    def update_check_run(self, installation_id: int, repo: str, check_run_id: int, view: CheckRunView,
                         annotations: Sequence[dict[str, Any]] = (), *, output_only: bool = False) -> None:
        """PATCH the check run; `output_only` appends annotations to a completed run without touching status."""
        fields = {"output": view.output(annotations)} if output_only else _fields(view, annotations)
        with _translated(f"updating check run {check_run_id} on {repo}"):
            self.client(installation_id).get_repo(repo).get_check_run(check_run_id).edit(**fields)

    def collaborator_access(self, installation_id: int, repo: str, login: str) -> tuple[str, str]:
        """(role_name, permission) of `login` on `repo`: role_name tells maintain and triage apart."""
        with _translated(f"reading {login}'s permission on {repo}"):
            gh = self.client(installation_id)
            url = f"{gh.get_repo(repo).url}/collaborators/{login}/permission"
            _headers, data = gh.requester.requestJsonAndCheck("GET", url)
        return str(data.get("role_name") or ""), str(data.get("permission") or "none")

    def pull_request(self, installation_id: int, repo: str, number: int) -> PullHead:
        with _translated(f"reading pull request {repo}#{number}"):
            pull = self.client(installation_id).get_repo(repo).get_pull(number)
            return PullHead(head_sha=pull.head.sha, head_ref=pull.head.ref, author=pull.user.login,
                            association=str(pull.raw_data.get("author_association", "NONE")), state=pull.state)

    def comment(self, installation_id: int, repo: str, number: int, body: str) -> None:
        with _translated(f"commenting on {repo}#{number}"):
            self.client(installation_id).get_repo(repo).get_issue(number).create_comment(body)

    def create_comment(self, installation_id: int, repo: str, number: int, body: str) -> int:
        """A new comment on a pull request; its id, to edit it in place later."""
        with _translated(f"commenting on {repo}#{number}"):
            return int(self.client(installation_id).get_repo(repo).get_issue(number).create_comment(body).id)

    def edit_comment(self, installation_id: int, repo: str, comment_id: int, body: str) -> None:
        # PATCH directly: PyGithub's IssueComment.edit needs the comment fetched first (a GET we do not need).
        with _translated(f"editing comment {comment_id} on {repo}"):
            gh = self.client(installation_id)
            url = f"{gh.get_repo(repo).url}/issues/comments/{comment_id}"
            gh.requester.requestJsonAndCheck("PATCH", url, input={"body": body})

    def react(self, installation_id: int, repo: str, number: int, comment_id: int, content: str) -> None:
        with _translated(f"reacting to comment {comment_id} on {repo}"):
            issue = self.client(installation_id).get_repo(repo).get_issue(number)
            issue.get_comment(comment_id).create_reaction(content)


@dataclass(frozen=True)
class PullHead:
    head_sha: str
    head_ref: str
    author: str
    association: str
    state: str


def _fields(view: CheckRunView, annotations: Sequence[dict[str, Any]]) -> dict[str, object]:
    fields: dict[str, object] = {
        "status": view.status, "external_id": view.external_id, "details_url": view.details_url,
        "output": view.output(annotations),
    }
    if view.conclusion is not None:
        fields["conclusion"] = view.conclusion
    if view.actions:
        fields["actions"] = view.actions
    return fields


class _translated:
    """Turn PyGithub's exceptions into ours, so callers never import PyGithub."""

    def __init__(self, doing: str) -> None:
        self.doing = doing

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, _tb: object) -> bool:
        if not isinstance(exc, GithubException):
            return False
        status = exc.status
        headers = exc.headers or {}
        if isinstance(exc, RateLimitExceededException) or status in (403, 429) and _rate_limited(headers):
            raise TransientGitHubError(f"rate limited while {self.doing}", _retry_after(headers)) from None
        if status is not None and status >= 500:
            raise TransientGitHubError(f"GitHub answered {status} while {self.doing}") from None
        if status in (404, 422):
            raise GoneError(f"GitHub answered {status} while {self.doing}: {exc.message}") from None
        return False


def _rate_limited(headers: dict[str, str]) -> bool:
    lowered = {k.lower(): v for k, v in headers.items()}
    return "retry-after" in lowered or lowered.get("x-ratelimit-remaining") == "0"


def _retry_after(headers: dict[str, str]) -> float | None:
    lowered = {k.lower(): v for k, v in headers.items()}
    if "retry-after" in lowered:
        try:
            return float(lowered["retry-after"])
        except ValueError:
            return None
    if "x-ratelimit-reset" in lowered:
        try:
            return max(0.0, float(lowered["x-ratelimit-reset"]) - time.time())
        except ValueError:
            return None
    return None
