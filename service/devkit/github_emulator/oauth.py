"""github.com's OAuth web flow for a GitHub App, and the two API calls the browser makes with a user's token.

These routes are not in the REST OpenAPI subset: `/login/oauth/authorize` and `/login/oauth/access_token`
live on github.com, not on the API host (https://docs.github.com/apps/creating-github-apps/authenticating-with-a-
github-app/generating-a-user-access-token-for-a-github-app). The emulator serves them on its one host.

The emulated browser session: a request to `/login/oauth/authorize` carrying the cookie `user_session=<login>`
is a user signed in to github.com who has already authorised the App, so GitHub redirects straight back with a
code (as it does for a returning user). Without the cookie it answers 401 (a real GitHub shows its sign-in form).
"""

from __future__ import annotations

import json
import secrets
import weakref
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from . import resources
from .routes import Reply, error_reply, not_found
from .state import EmulatorState

CLIENT_ID = "Iv1.emulatorclient0"
CLIENT_SECRET = "emulator-client-secret"
SESSION_COOKIE = "user_session"
# GitHub App user access tokens start with ghu_ (installation tokens with ghs_).
USER_TOKEN_PREFIX = "ghu_"
OAUTH_PREFIX = "/login/oauth/"


@dataclass
class _Grant:
    login: str
    redirect_uri: str


@dataclass
class OAuthBook:
    codes: dict[str, _Grant] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)  # token -> login
    revoked: set[str] = field(default_factory=set)


# Kept beside the state rather than in it, so the emulator's state module needs no change.
_books: weakref.WeakKeyDictionary[EmulatorState, OAuthBook] = weakref.WeakKeyDictionary()


def book(state: EmulatorState) -> OAuthBook:
    with state.lock:
        return _books.setdefault(state, OAuthBook())


def _user_token(authorization: str | None) -> str | None:
    scheme, _, value = (authorization or "").partition(" ")
    value = value.strip()
    return value if scheme.lower() in ("bearer", "token") and value.startswith(USER_TOKEN_PREFIX) else None


def handles(raw_path: str, authorization: str | None) -> bool:
    """True for the OAuth routes and for any API call made with a user access token."""
    return raw_path.startswith(OAUTH_PREFIX) or _user_token(authorization) is not None


def handle(state: EmulatorState, method: str, raw_path: str, raw_body: bytes, headers: Any) -> Reply:
    parts = urlsplit(raw_path)
    state.record_request(method, parts.path, None)  # never the code or the secret
    if method == "GET" and parts.path == OAUTH_PREFIX + "authorize":
        return _authorize(state, _query(parts.query), headers.get("Cookie", ""))
    if method == "POST" and parts.path == OAUTH_PREFIX + "access_token":
        return _access_token(state, _form(raw_body, headers.get("Content-Type", "")))
    token = _user_token(headers.get("Authorization"))
    login = book(state).tokens.get(token or "")
    if token is None or login is None or token in book(state).revoked:
        return error_reply(401, "Bad credentials")
    if method == "GET" and parts.path == "/user":
        return Reply(200, resources.user(state, login))
    segments = parts.path.strip("/").split("/")
    if method == "GET" and len(segments) == 3 and segments[0] == "repos":
        return _get_repo(state, login, f"{segments[1]}/{segments[2]}")
    state.record_error(f"user-token call the emulator does not serve: {method} {raw_path}")
    return not_found()


def revoke(state: EmulatorState, token: str) -> None:
    """What a user revoking the App's authorisation on github.com does to their tokens."""
    with state.lock:
        book(state).revoked.add(token)


def _authorize(state: EmulatorState, query: dict[str, str], cookie_header: str) -> Reply:
    if query.get("client_id") != CLIENT_ID:
        state.record_error(f"OAuth authorize with unknown client_id {query.get('client_id')!r}")
        return not_found()
    redirect_uri = query.get("redirect_uri", "")
    if not redirect_uri.startswith(("http://", "https://")):
        return error_reply(422, "The redirect_uri MUST match the registered callback URL for this application.")
    cookie = SimpleCookie()
    cookie.load(cookie_header)
    if SESSION_COOKIE not in cookie:
        return error_reply(401, f"Not signed in to the emulated github.com (set the {SESSION_COOKIE} cookie)")
    code = secrets.token_hex(10)
    with state.lock:
        book(state).codes[code] = _Grant(cookie[SESSION_COOKIE].value, redirect_uri)
    back = {"code": code, **({"state": query["state"]} if "state" in query else {})}
    separator = "&" if "?" in redirect_uri else "?"
    return Reply(302, None, {"Location": f"{redirect_uri}{separator}{urlencode(back)}"})


def _access_token(state: EmulatorState, form: dict[str, str]) -> Reply:
    # GitHub answers 200 with an `error` field for a bad code or secret, not an HTTP error.
    if form.get("client_id") != CLIENT_ID or form.get("client_secret") != CLIENT_SECRET:
        return Reply(200, {"error": "incorrect_client_credentials",
                           "error_description": "The client_id and/or client_secret passed are incorrect."})
    with state.lock:
        grant = book(state).codes.pop(form.get("code", ""), None)  # a code is good for one exchange only
    if grant is None or ("redirect_uri" in form and form["redirect_uri"] != grant.redirect_uri):
        return Reply(200, {"error": "bad_verification_code",
                           "error_description": "The code passed is incorrect or expired."})
    token = USER_TOKEN_PREFIX + secrets.token_hex(18)
    with state.lock:
        book(state).tokens[token] = grant.login
    return Reply(200, {"access_token": token, "token_type": "bearer", "scope": ""})


def _get_repo(state: EmulatorState, login: str, full_name: str) -> Reply:
    """A user-to-server token sees a repository the App is installed on and the user may read; else 404."""
    repo = state.repos.get(full_name)
    if repo is None or state.installation_for(full_name) is None:
        return not_found()
    if repo.private and state.role_of(full_name, login) == "none":
        return not_found()
    body = resources.repository(state, repo)
    for problem in state.spec.validate_response("repos/get", 200, body):
        state.record_error(f"emulator bug: user-token GET /repos/{full_name} breaks the spec: {problem}")
    return Reply(200, body)


def _query(raw: str) -> dict[str, str]:
    return {key: values[-1] for key, values in parse_qs(raw, keep_blank_values=True).items()}


def _form(raw_body: bytes, content_type: str) -> dict[str, str]:
    if "json" in content_type:
        try:
            body = json.loads(raw_body or b"{}")
        except ValueError:
            return {}
        return {str(k): str(v) for k, v in body.items()} if isinstance(body, dict) else {}
    return _query(raw_body.decode("utf-8", "replace"))
