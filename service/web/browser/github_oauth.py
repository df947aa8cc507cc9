"""The HTTP side of sign-in with GitHub: the authorize URL, the code exchange, the user and a repository read.

Uses the App's own OAuth client (a user-to-server token): no scopes are asked for, the token can read what both
the App's installation and the user can read, so `GET /repos/{owner}/{repo}` answering 200 means readable.
"""

from __future__ import annotations

from urllib.parse import urlencode

import requests

from service.config import Settings

TIMEOUT_S = 10


class SignInError(Exception):
    """GitHub refused the code or the client credentials; the visitor may simply try again."""


def authorize_url(settings: Settings, state: str) -> str:
    query = {"client_id": settings.github_client_id, "redirect_uri": callback_url(settings), "state": state,
             "allow_signup": "false"}
    return f"{settings.github_web_url}/login/oauth/authorize?{urlencode(query)}"


def callback_url(settings: Settings) -> str:
    return f"{settings.public_url}/oauth/callback"


def exchange_code(settings: Settings, code: str) -> str:
    response = requests.post(
        f"{settings.github_web_url}/login/oauth/access_token",
        data={"client_id": settings.github_client_id, "client_secret": settings.github_client_secret.reveal(),
              "code": code, "redirect_uri": callback_url(settings)},
        headers={"Accept": "application/json"}, timeout=TIMEOUT_S,
    )
    body = response.json() if response.ok else {}
    token = body.get("access_token")
    if not isinstance(token, str) or not token:
        # GitHub answers 200 with {"error": "bad_verification_code"} for a used or expired code.
        raise SignInError(str(body.get("error_description") or body.get("error") or response.status_code))
    return token


def _api(settings: Settings, token: str, path: str) -> requests.Response:
    return requests.get(f"{settings.github_api_url}{path}", timeout=TIMEOUT_S,
                        headers={"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json",
                                 "X-GitHub-Api-Version": "2022-11-28"})


def user_login(settings: Settings, token: str) -> str:
    response = _api(settings, token, "/user")
    if response.status_code != 200:
        raise SignInError(f"GET /user answered {response.status_code}")
    return str(response.json()["login"])


def repo_read_status(settings: Settings, token: str, full_name: str) -> int:
    """200: readable; 404: not (GitHub hides what a user may not see); 401: the token is no longer valid."""
    return _api(settings, token, f"/repos/{full_name}").status_code
