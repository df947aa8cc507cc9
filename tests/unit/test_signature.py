"""The webhook signature check GitHub deliveries must pass."""

import pytest

from service.intake.signature import InvalidSignature, sign, verify_signature

BODY = b'{"action": "opened"}'


def test_accepts_githubs_signature_of_the_raw_body() -> None:
    verify_signature("s3cret", BODY, sign("s3cret", BODY))


@pytest.mark.parametrize(
    ("secret", "header", "reason"),
    [
        ("s3cret", None, "missing"),
        ("s3cret", "", "missing"),
        ("s3cret", sign("other", BODY), "does not match"),
        ("s3cret", sign("s3cret", BODY + b" "), "does not match"),
        ("s3cret", sign("s3cret", BODY).replace("sha256=", "sha1="), "must start with"),
        ("", sign("", BODY), "no webhook secret"),
    ],
    ids=["absent", "empty", "wrong-secret", "other-body", "sha1", "no-secret-configured"],
)
def test_refuses(secret: str, header: str | None, reason: str) -> None:
    with pytest.raises(InvalidSignature, match=reason):
        verify_signature(secret, BODY, header)
