"""Private `/_emulator/` JSON routes, so a process that did not start the emulator can seed and inspect it."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .routes import Reply
from .state import EmulatorState, Injection

PREFIX = "/_emulator/"


def _seed_repo(state: EmulatorState, body: dict[str, Any]) -> Any:
    state.add_repo(body["full_name"], body.get("default_branch", "main"), bool(body.get("private", False)))
    return {"ok": True}


def _seed_installation(state: EmulatorState, body: dict[str, Any]) -> Any:
    state.add_installation(int(body["installation_id"]), list(body["repos"]))
    return {"ok": True}


def _seed_pull(state: EmulatorState, body: dict[str, Any]) -> Any:
    state.add_pull(**body)
    return {"ok": True}


def _seed_permission(state: EmulatorState, body: dict[str, Any]) -> Any:
    state.set_permission(body["full_name"], body["login"], body["role"])
    return {"ok": True}


def _seed_injection(state: EmulatorState, body: dict[str, Any]) -> Any:
    state.inject(Injection(**body))
    return {"ok": True}


READS: dict[str, Callable[[EmulatorState, dict[str, str]], Any]] = {
    "check-runs": lambda state, query: state.list_check_runs(query.get("repository")),
    "check-suites": lambda state, query: state.list_check_suites(),
    "errors": lambda state, query: list(state.errors),
    "requests": lambda state, query: [list(request) for request in state.requests],
    "comments": lambda state, query: list(state.comments),
    "reactions": lambda state, query: list(state.reactions),
    "statuses": lambda state, query: list(state.statuses),
}
WRITES: dict[str, Callable[[EmulatorState, dict[str, Any]], Any]] = {
    "repos": _seed_repo,
    "installations": _seed_installation,
    "pulls": _seed_pull,
    "permissions": _seed_permission,
    "injections": _seed_injection,
}


def handle(state: EmulatorState, method: str, raw_path: str, raw_body: bytes) -> Reply:
    parts = urlsplit(raw_path)
    name = parts.path.removeprefix(PREFIX).strip("/")
    if method == "GET" and name in READS:
        query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
        with state.lock:
            return Reply(200, READS[name](state, query))
    if method == "POST" and name in WRITES:
        try:
            body = json.loads(raw_body or b"{}")
            return Reply(201, WRITES[name](state, body))
        except (ValueError, TypeError, KeyError) as exc:
            return Reply(400, {"message": f"bad {name} request: {exc!r}"})
    routes = [f"GET {PREFIX}{read}" for read in READS] + [f"POST {PREFIX}{write}" for write in WRITES]
    return Reply(404, {"message": f"no emulator control route {method} {parts.path}", "routes": routes})
