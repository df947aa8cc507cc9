"""Who may call what: App JWTs (RS256, `iss` = app id) for /app routes, installation tokens for repositories."""

from __future__ import annotations

import time

import jwt
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey, RSAPublicKey
from cryptography.hazmat.primitives.serialization import load_pem_private_key, load_pem_public_key

from .state import EmulatorState, Token, utc_now

# GitHub refuses App JWTs that expire more than ten minutes ahead; allow a little clock drift.
MAX_JWT_LIFETIME_S = 600 + 60
APP_JWT_OPERATIONS = frozenset({"apps/get-authenticated", "apps/create-installation-access-token",
                                "apps/get-repo-installation"})
# GitHub also serves /rate_limit without credentials (at the lower anonymous limit).
OPTIONAL_AUTH_OPERATIONS = frozenset({"rate-limit/get"})


class AuthError(Exception):
    """A refusal: `status` 401 for bad credentials, 404 where GitHub hides what the caller may not see."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def load_public_key(pem: str | bytes) -> RSAPublicKey:
    """The App's public key; a private key PEM is accepted too and its public half used."""
    data = pem.encode() if isinstance(pem, str) else pem
    key = load_pem_private_key(data, None) if b"PRIVATE KEY" in data else load_pem_public_key(data)
    public = key.public_key() if isinstance(key, RSAPrivateKey) else key
    if not isinstance(public, RSAPublicKey):
        raise ValueError("the GitHub App key must be an RSA key")
    return public


def _credential(authorization: str | None) -> str:
    scheme, _, value = (authorization or "").partition(" ")
    if scheme.lower() not in ("bearer", "token") or not value.strip():
        raise AuthError(401, "Requires authentication")
    return value.strip()


def verify_app_jwt(authorization: str | None, public_key: RSAPublicKey, app_id: int) -> None:
    token = _credential(authorization)
    try:
        claims = jwt.decode(token, public_key, algorithms=["RS256"],
                            options={"require": ["exp", "iat", "iss"]})
    except jwt.PyJWTError as exc:
        raise AuthError(401, f"A JSON web token could not be decoded ({exc})") from exc
    if str(claims["iss"]) != str(app_id):
        raise AuthError(401, f"'Issuer' claim ('iss') must be the app id {app_id}")
    if int(claims["exp"]) - time.time() > MAX_JWT_LIFETIME_S:
        raise AuthError(401, "'Expiration time' claim ('exp') is too far in the future")


def installation_token(state: EmulatorState, authorization: str | None) -> Token:
    value = _credential(authorization)
    with state.lock:
        token = state.tokens.get(value)
    if token is None:
        raise AuthError(401, "Bad credentials")
    if token.expires_at <= utc_now():
        raise AuthError(401, "Bad credentials (the installation token has expired)")
    return token


def authorize(state: EmulatorState, public_key: RSAPublicKey, operation_id: str, params: dict[str, str],
              authorization: str | None) -> None:
    """Raises AuthError unless the caller may run this operation on this repository."""
    if operation_id in OPTIONAL_AUTH_OPERATIONS and authorization is None:
        return
    is_jwt = _credential(authorization).count(".") == 2
    if operation_id in APP_JWT_OPERATIONS or (operation_id in OPTIONAL_AUTH_OPERATIONS and is_jwt):
        verify_app_jwt(authorization, public_key, state.app_id)
        return
    token = installation_token(state, authorization)
    if "owner" not in params:
        return
    full_name = f"{params['owner']}/{params['repo']}"
    with state.lock:
        covered = full_name in state.installations.get(token.installation_id, set())
    covered = covered and (token.repos is None or full_name in token.repos)
    if not covered or full_name not in state.repos:
        raise AuthError(404, "Not Found")
