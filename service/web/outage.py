"""What the web answers when a request cannot be served: the database unavailable (down, read-only, full) is a 503
with Retry-After, so GitHub's redelivery or a reload succeeds later; anything else a 500. The webhook answers JSON,
pages a plain page that says what is wrong (never the server's bare error page, never the database's message)."""

from __future__ import annotations

import logging

from flask import Flask, Response, jsonify, render_template, request
from werkzeug.exceptions import InternalServerError

from service.observability.metrics import recorded
from service.store import UNAVAILABLE, Conflict, unavailable_reason

log = logging.getLogger(__name__)
RETRY_AFTER_S = 30
UNAVAILABLE_TEXT = ("compile-ci cannot use its database right now, so runs and jobs cannot be shown. Webhook "
                    "deliveries are answered 503 and GitHub can redeliver them; nothing is lost. Try again in a "
                    "minute.")


def install(app: Flask) -> None:
    for error in (*UNAVAILABLE, Conflict):
        app.register_error_handler(error, _database_unavailable)
    app.register_error_handler(InternalServerError, _internal_error)

    @app.get("/healthz")
    def _healthz() -> Response:
        # The process serves requests; the database and Redis are not asked (an outage answers 503 on its own,
        # and a load balancer that took every web pod out for it would turn those 503s into refused connections).
        return Response("ok\n", mimetype="text/plain")


def _database_unavailable(exc: Exception) -> tuple[Response | str, int, dict[str, str]]:
    log.warning("database unavailable (%s %s): %s", request.method, request.path, unavailable_reason(exc))
    recorded().errors.labels("database").inc()
    headers = {"Retry-After": str(RETRY_AFTER_S)}
    if request.path == "/webhook":
        return jsonify(error="database unavailable: redeliver later", retry_after=RETRY_AFTER_S), 503, headers
    page = render_template("message.html", title="Database unavailable", text=UNAVAILABLE_TEXT)
    return page, 503, headers


def _internal_error(exc: InternalServerError) -> tuple[Response | str, int]:
    if request.path == "/webhook":
        return jsonify(error="internal error: the delivery was not handled; redeliver it"), 500
    text = "Something went wrong on our side while serving this page; it is logged. Try again later."
    return render_template("message.html", title="Internal error", text=text), 500
