"""The browser's composition root: the feature blueprints of service/browser under one blueprint for create_app."""

from __future__ import annotations

import secrets

from flask import Blueprint
from flask.blueprints import BlueprintSetupState
from werkzeug.wrappers import Response

from service.web.browser import (
    access,
    canary,
    code_compare,
    jobs,
    log_pages,
    repro_info,
    runs,
    status,
    test_history,
    testcase,
)

blueprint = Blueprint("pages", __name__)
for feature in (access, runs, jobs, log_pages, testcase, code_compare, status, repro_info, test_history, canary):
    blueprint.register_blueprint(feature.blueprint)


@blueprint.record_once
def _configure_sessions(state: BlueprintSetupState) -> None:
    app = state.app
    settings = app.extensions["compile_ci"].settings
    # Without sign-in configured the session holds nothing worth keeping, so a per-process key is enough.
    app.secret_key = settings.session_secret.reveal() or secrets.token_hex(32)
    app.config.update(SESSION_COOKIE_HTTPONLY=True, SESSION_COOKIE_SAMESITE="Lax",
                      SESSION_COOKIE_SECURE=settings.public_url.startswith("https://"))


@blueprint.after_app_request
def _security_headers(response: Response) -> Response:
    # Pages never embed other sites; scripts come only from /static (no inline script can run).
    response.headers.setdefault("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; "
                                "img-src 'self' data:; frame-ancestors 'none'")
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    return response
