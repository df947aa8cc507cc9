"""The emulator's in-memory world: repositories, installations, tokens, check runs and what was posted."""

from __future__ import annotations

import copy
import re
import secrets
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from .spec import OpenAPISpec

TOKEN_LIFETIME = timedelta(hours=1)
_PUBLIC_API = "https://api.github.com"
ROLE_TO_PERMISSION = {"admin": "admin", "maintain": "write", "write": "write", "triage": "read", "read": "read",
                      "none": "none"}


def utc_now() -> datetime:
    return datetime.now(UTC)


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Repo:
    full_name: str
    id: int
    default_branch: str = "main"
    private: bool = False


@dataclass
class Pull:
    full_name: str
    number: int
    head_sha: str
    head_ref: str
    base_ref: str
    author_login: str
    author_association: str
    head_full_name: str
    title: str = "Emulated pull request"
    state: str = "open"
    files: list[str] = field(default_factory=list)


@dataclass
class Token:
    token: str
    installation_id: int
    expires_at: datetime
    permissions: dict[str, str]
    repos: frozenset[str] | None = None


@dataclass
class Injection:
    """A canned answer for the next `times` requests whose method and path match."""

    method: str
    path_regex: str
    status: int
    apply: bool = False
    times: int = 1
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None


@dataclass
class CheckRunRecord:
    full_name: str
    run: dict[str, Any]
    history: list[tuple[str, str | None]] = field(default_factory=list)
    annotations: list[dict[str, Any]] = field(default_factory=list)
    actions: list[dict[str, Any]] = field(default_factory=list)

    def public_run(self) -> dict[str, Any]:
        """The check run exactly as GitHub's API shows it."""
        return copy.deepcopy(self.run)

    def public(self) -> dict[str, Any]:
        """The check run as GitHub shows it, plus what only the emulator keeps."""
        return copy.deepcopy({**self.run, "repository": self.full_name, "history": self.history,
                              "annotations": self.annotations, "actions": self.actions})


@dataclass
class CheckSuite:
    id: int
    full_name: str
    head_sha: str
    rerequests: int = 0


class EmulatorState:
    """Everything the fake GitHub knows; every method that touches it holds `lock`."""

    def __init__(self, spec: OpenAPISpec, app_id: int, app_slug: str) -> None:
        self.spec = spec
        self.app_id = app_id
        self.app_slug = app_slug
        self.base_url = ""
        self.lock = threading.RLock()
        self.repos: dict[str, Repo] = {}
        self.installations: dict[int, set[str]] = {}
        self.tokens: dict[str, Token] = {}
        self.pulls: dict[tuple[str, int], Pull] = {}
        self.permissions: dict[tuple[str, str], str] = {}
        self.check_runs: dict[int, CheckRunRecord] = {}
        self.suites: dict[int, CheckSuite] = {}
        self.comments: list[dict[str, Any]] = []
        self.reactions: list[dict[str, Any]] = []
        self.statuses: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str, Any]] = []
        self.errors: list[str] = []
        self.injections: list[Injection] = []
        self._ids: dict[str, int] = {}

    def next_id(self, kind: str) -> int:
        with self.lock:
            self._ids[kind] = self._ids.get(kind, 0) + 1
            return self._ids[kind]

    def example(self, name: str) -> Any:
        """A spec example whose api.github.com URLs point at this emulator, so clients follow them here."""
        return _rebase(self.spec.example(name), self.base_url)

    def add_repo(self, full_name: str, default_branch: str = "main", private: bool = False) -> Repo:
        _check_full_name(full_name)
        with self.lock:
            known = self.repos.get(full_name)
            repo = Repo(full_name, known.id if known else 1000 + self.next_id("repo"), default_branch, private)
            self.repos[full_name] = repo
            return repo

    def add_installation(self, installation_id: int, repos: list[str]) -> None:
        with self.lock:
            for full_name in repos:
                if full_name not in self.repos:
                    self.add_repo(full_name)
            self.installations.setdefault(installation_id, set()).update(repos)

    def add_pull(self, full_name: str, number: int, head_sha: str, head_ref: str, base_ref: str,
                 author_login: str, author_association: str, *, head_full_name: str | None = None,
                 title: str = "Emulated pull request", state: str = "open", files: list[str] | None = None) -> Pull:
        with self.lock:
            if full_name not in self.repos:
                self.add_repo(full_name)
            pull = Pull(full_name, number, head_sha, head_ref, base_ref, author_login, author_association,
                        head_full_name or full_name, title, state, list(files or []))
            self.pulls[(full_name, number)] = pull
            return pull

    def set_permission(self, full_name: str, login: str, role: str) -> None:
        if role not in ROLE_TO_PERMISSION:
            raise ValueError(f"unknown role {role!r}; one of {sorted(ROLE_TO_PERMISSION)}")
        with self.lock:
            self.permissions[(full_name, login.lower())] = role

    def role_of(self, full_name: str, login: str) -> str:
        with self.lock:
            return self.permissions.get((full_name, login.lower()), "none")

    def mint_token(self, installation_id: int, permissions: dict[str, str],
                   repos: frozenset[str] | None = None) -> Token:
        """A token for the installation's repositories, or for `repos` only (a scoped token)."""
        token = Token("ghs_" + secrets.token_hex(18), installation_id, utc_now() + TOKEN_LIFETIME, permissions,
                      repos)
        with self.lock:
            self.tokens[token.token] = token
        return token

    def installation_for(self, full_name: str) -> int | None:
        with self.lock:
            return next((iid for iid, repos in self.installations.items() if full_name in repos), None)

    def inject(self, injection: Injection) -> None:
        re.compile(injection.path_regex)
        with self.lock:
            self.injections.append(injection)

    def take_injection(self, method: str, path: str) -> Injection | None:
        with self.lock:
            for injection in self.injections:
                if injection.method.upper() == method.upper() and re.search(injection.path_regex, path):
                    injection.times -= 1
                    if injection.times <= 0:
                        self.injections.remove(injection)
                    return injection
        return None

    def record_error(self, message: str) -> None:
        with self.lock:
            self.errors.append(message)

    def record_request(self, method: str, path: str, body: Any) -> None:
        with self.lock:
            self.requests.append((method, path, copy.deepcopy(body)))

    def suite_for(self, full_name: str, head_sha: str) -> tuple[CheckSuite, bool]:
        """GitHub keeps one check suite per app and head commit; (suite, created)."""
        with self.lock:
            for suite in self.suites.values():
                if suite.full_name == full_name and suite.head_sha == head_sha:
                    return suite, False
            suite = CheckSuite(self.next_id("check_suite"), full_name, head_sha)
            self.suites[suite.id] = suite
            return suite, True

    def list_check_suites(self) -> list[dict[str, Any]]:
        with self.lock:
            return [{"id": s.id, "repository": s.full_name, "head_sha": s.head_sha, "rerequests": s.rerequests}
                    for s in self.suites.values()]

    def list_check_runs(self, full_name: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [record.public() for _, record in sorted(self.check_runs.items())
                    if full_name is None or record.full_name == full_name]


def _check_full_name(full_name: str) -> None:
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", full_name):
        raise ValueError(f"repository full name must be OWNER/NAME, got {full_name!r}")


def _rebase(node: Any, base_url: str) -> Any:
    if isinstance(node, str):
        return base_url + node[len(_PUBLIC_API):] if node.startswith(_PUBLIC_API) else node
    if isinstance(node, list):
        return [_rebase(item, base_url) for item in node]
    if isinstance(node, dict):
        return {key: _rebase(value, base_url) for key, value in node.items()}
    return node
