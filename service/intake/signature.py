"""Webhook signature: HMAC-SHA256 of the raw body, compared in constant time."""

from __future__ import annotations

import hashlib
import hmac


class InvalidSignature(Exception):
    pass


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify_signature(secret: str, body: bytes, header: str | None) -> None:
    """Raise InvalidSignature unless `header` is GitHub's X-Hub-Signature-256 for `body`."""
    if not secret:
        # Without a secret anyone could post events; refuse rather than accept everything.
        raise InvalidSignature("no webhook secret is configured")
    if not header:
        raise InvalidSignature("missing X-Hub-Signature-256 header")
    if not header.isascii():
        # compare_digest refuses non-ASCII str; such a header cannot be a hex digest anyway.
        raise InvalidSignature("X-Hub-Signature-256 must be ASCII")
    if not header.startswith("sha256="):
        raise InvalidSignature("X-Hub-Signature-256 must start with 'sha256='")
    if not hmac.compare_digest(sign(secret, body), header):
        raise InvalidSignature("signature does not match the body")
