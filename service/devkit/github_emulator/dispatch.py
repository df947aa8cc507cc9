"""The strict path of every GitHub request: route, authenticate, validate, inject faults, answer, self-check."""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, urlsplit

from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey

from . import auth, routes
from .routes import Call, Reply, error_reply
from .state import EmulatorState, Injection


def handle(state: EmulatorState, public_key: RSAPublicKey, method: str, raw_path: str, raw_body: bytes,
           authorization: str | None) -> Reply:
    parts = urlsplit(raw_path)
    body, unparsable = _parse_json(raw_body)
    state.record_request(method, raw_path, body)
    matched = state.spec.match(method, parts.path)
    if matched is None:
        state.record_error(f"unknown route: {method} {raw_path}")
        return error_reply(404, "Not Found")
    if unparsable:
        state.record_error(f"{method} {raw_path}: request body is not JSON")
        return error_reply(400, "Problems parsing JSON")
    operation_id, params = matched
    try:
        auth.authorize(state, public_key, operation_id, params, authorization)
    except auth.AuthError as refusal:
        return error_reply(refusal.status, refusal.message)
    query = parse_qs(parts.query, keep_blank_values=True)
    problems = _request_problems(state, operation_id, query, body)
    if problems:
        state.record_error(f"{method} {raw_path}: invalid request: {'; '.join(problems)}")
        return error_reply(422, "Validation Failed", problems)
    call = Call(operation_id, params, {name: values[-1] for name, values in query.items()}, body)
    return _answer(state, method, parts.path, call)


def _answer(state: EmulatorState, method: str, path: str, call: Call) -> Reply:
    injection = state.take_injection(method, path)
    if injection is not None and not injection.apply:
        return _injected(injection)
    reply = routes.ROUTES[call.operation_id](state, call)
    if 200 <= reply.status < 300:
        for problem in state.spec.validate_response(call.operation_id, reply.status, reply.body):
            state.record_error(f"emulator bug: {method} {path} answer {reply.status} breaks the spec: {problem}")
    # apply=True models "GitHub applied the change, then the client saw a 5xx" (the change is kept).
    return reply if injection is None else _injected(injection)


def _request_problems(state: EmulatorState, operation_id: str, query: dict[str, list[str]], body: Any) -> list[str]:
    problems = state.spec.validate_query(operation_id, query) + state.spec.validate_request(operation_id, body)
    rule = routes.RULES.get(operation_id)
    return problems + rule(body) if rule is not None and not problems else problems


def _injected(injection: Injection) -> Reply:
    body = injection.body
    if body is None:
        known = injection.status in HTTPStatus._value2member_map_
        phrase = HTTPStatus(injection.status).phrase if known else "Injected failure"
        body = {"message": phrase, "documentation_url": routes.DOCS_URL}
    return Reply(injection.status, body, dict(injection.headers))


def _parse_json(raw: bytes) -> tuple[Any, bool]:
    if not raw.strip():
        return None, False
    try:
        return json.loads(raw), False
    except ValueError:
        return raw.decode("utf-8", "replace"), True
