"""POST /webhook: verify, parse, route once per delivery id. Never calls GitHub: slow work is queued."""

from __future__ import annotations

import logging
import re

from flask import Blueprint, Response, current_app, jsonify, request

from service.intake.body import SlowBody, read_body
from service.intake.delivery import handle_once
from service.intake.payload import parse_payload
from service.intake.router import BadPayload, Event, Router
from service.intake.signature import InvalidSignature, verify_signature

log = logging.getLogger(__name__)
blueprint = Blueprint("webhook", __name__)
# GitHub's event names are snake_case words and its delivery ids are GUIDs; ids are keys in the store: kept short.
EVENT_NAME = re.compile(r"[a-z_]{1,64}")
DELIVERY_ID = re.compile(r"[A-Za-z0-9-]{1,64}")


@blueprint.post("/webhook")
def receive() -> tuple[Response, int] | Response:
    wiring = current_app.extensions["compile_ci"]
    try:
        body = read_body(request.stream, request.environ)
    except SlowBody as exc:
        return jsonify(error=str(exc)), 408
    try:
        verify_signature(wiring.settings.webhook_secret.reveal(), body, request.headers.get("X-Hub-Signature-256"))
    except InvalidSignature as exc:
        return jsonify(error=f"signature: {exc}"), 401
    name = request.headers.get("X-GitHub-Event", "")
    delivery_id = request.headers.get("X-GitHub-Delivery", "")
    if not name or not delivery_id:
        return jsonify(error="X-GitHub-Event and X-GitHub-Delivery headers are required"), 400
    if not EVENT_NAME.fullmatch(name) or not DELIVERY_ID.fullmatch(delivery_id):
        return jsonify(error="X-GitHub-Event must be an event name and X-GitHub-Delivery a GUID"), 400
    try:
        payload = parse_payload(body, request.content_type or "")
    except BadPayload as exc:
        return jsonify(error=str(exc)), 400
    event = Event(name, delivery_id, payload)
    if name == "ping":
        return jsonify(message="pong", zen=payload.get("zen")), 200
    router: Router = wiring.router
    if not router.handlers_for(event):
        return Response(status=204)
    try:
        outcomes = handle_once(wiring.store, router, wiring.handler_deps, event)
    except BadPayload as exc:
        return jsonify(error=str(exc)), 400  # nothing was recorded: a fixed redelivery is handled
    if outcomes is None:
        return jsonify(message="duplicate delivery: already handled", delivery=delivery_id), 200
    for outcome in outcomes:
        log.info("delivery %s (%s.%s): %s", delivery_id, name, event.action, outcome.message,
                 extra={"run_id": outcome.run_id})
    runs = [o.run_id for o in outcomes if o.run_id]
    return jsonify(messages=[o.message for o in outcomes], runs=runs), 202
