"""Who may see what: public repositories to anyone, private ones to signed-in readers (sign-in with GitHub).

The Details link of a private repository's check run sends a signed-out maintainer to `/login?next=<page>`,
GitHub's authorize page, `/oauth/callback`, then back to the page. The user's token is kept in the session
cookie encrypted (Fernet keyed from COMPILE_CI_SESSION_SECRET); each repository's read check is remembered
there for READ_CHECK_TTL_S so browsing a run costs one GitHub call, not one per page.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from typing import Any
from urllib.parse import urlencode

from cryptography.fernet import Fernet, InvalidToken
from flask import Blueprint, abort, current_app, redirect, render_template, request, session
from werkzeug.wrappers import Response

from service.config import Settings
from service.store import Run
from service.web.browser import github_oauth

blueprint = Blueprint("access", __name__)
READ_CHECK_TTL_S = 600


def wiring() -> Any:  # noqa: ANN401 - service.web.app.Wiring, kept untyped to avoid importing the app
    return current_app.extensions["compile_ci"]


def _fernet(settings: Settings) -> Fernet:
    key = hashlib.sha256(b"compile-ci user token\0" + settings.session_secret.reveal().encode()).digest()
    return Fernet(base64.urlsafe_b64encode(key))


def signed_in_login() -> str | None:
    login = session.get("login")
    return login if isinstance(login, str) else None


def _token() -> str | None:
    sealed = session.get("token")
    if not isinstance(sealed, str):
        return None
    try:
        return _fernet(wiring().settings).decrypt(sealed.encode()).decode()
    except InvalidToken:  # the session secret was rotated
        return None


def safe_next(target: str | None) -> str:
    """Only a path on this site: never `//host` or `https://host` (an open redirect)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def can_read(run: Run) -> bool:
    if not run.private:
        return True
    readable = session.get("readable", {})
    if isinstance(readable, dict) and readable.get(run.repo_full_name, 0) > time.time():
        return True
    token = _token()
    if token is None:
        return False
    status = github_oauth.repo_read_status(wiring().settings, token, run.repo_full_name)
    if status == 401:  # revoked on GitHub: sign in again
        session.clear()
        return False
    if status != 200:
        return False
    session["readable"] = {**(readable if isinstance(readable, dict) else {}),
                           run.repo_full_name: time.time() + READ_CHECK_TTL_S}
    return True


def require_read(run: Run) -> None:
    """Signed out: off to sign in and back; signed in without access: 404, as GitHub hides private repos."""
    if can_read(run):
        return
    if signed_in_login() is None:
        abort(redirect("/login?" + urlencode({"next": request.full_path.rstrip("?")})))
    abort(404)


def readable_private_repos() -> list[str]:
    readable = session.get("readable", {})
    now = time.time()
    return [name for name, until in readable.items() if until > now] if isinstance(readable, dict) else []


@blueprint.get("/login")
def login() -> Response | tuple[str, int]:
    settings = wiring().settings
    if not settings.github_client_id:
        return render_template("message.html", title="Sign-in is not configured",
                               text="This deployment has no GitHub OAuth client (COMPILE_CI_GITHUB_CLIENT_ID)."), 503
    state = secrets.token_urlsafe(24)
    session["oauth_state"] = state
    session["next"] = safe_next(request.args.get("next"))
    return redirect(github_oauth.authorize_url(settings, state))


@blueprint.get("/oauth/callback")
def oauth_callback() -> Response | tuple[str, int]:
    expected, given = session.pop("oauth_state", ""), request.args.get("state", "")
    code = request.args.get("code", "")
    # Bytes: compare_digest raises TypeError on a non-ASCII str, which a forged state= would be.
    if not expected or not code or not hmac.compare_digest(str(expected).encode(), given.encode()):
        return render_template("message.html", title="Sign-in failed",
                               text="The sign-in link expired or was not started here; try again."), 400
    settings = wiring().settings
    try:
        token = github_oauth.exchange_code(settings, code)
        login_name = github_oauth.user_login(settings, token)
    except github_oauth.SignInError as exc:
        current_app.logger.info("sign-in refused by GitHub: %s", exc)
        return render_template("message.html", title="Sign-in failed", text="GitHub refused the sign-in."), 400
    target = safe_next(session.pop("next", "/"))
    session.clear()  # a fresh session on sign-in (no fixation of a visitor's earlier cookie)
    session.update(login=login_name, token=_fernet(settings).encrypt(token.encode()).decode(), readable={})
    return redirect(target)


@blueprint.post("/logout")
def logout() -> Response:
    session.clear()
    return redirect("/")


@blueprint.app_context_processor
def _signed_in() -> dict[str, object]:
    return {"signed_in_as": signed_in_login(), "sign_in_enabled": bool(wiring().settings.github_client_id)}
