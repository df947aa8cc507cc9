"""From a delivery's raw body to the payload dict: JSON or GitHub's form encoding, bounded and well-formed.

Everything a handler later reads comes out of here, so the checks that apply to the whole document live here:
nesting depth (the JSON decoder recurses), lone surrogates (they cannot be encoded, so hashing or storing them
fails far from here), and JSON's non-standard constants.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import parse_qs

from service.intake.router import BadPayload

MAX_DEPTH = 32  # GitHub's payloads nest about 7 deep
SURROGATE = re.compile(r"[\ud800-\udfff]")
FORM = "application/x-www-form-urlencoded"


def _no_constant(name: str) -> Any:
    raise BadPayload(f"body is not JSON: {name} is not a JSON value")


def parse_payload(body: bytes, content_type: str) -> dict[str, Any]:
    """The payload of a JSON or form-encoded (`payload=<json>`) delivery; BadPayload says what is wrong."""
    if content_type.split(";", 1)[0].strip().lower() == FORM:
        body = _form_payload(body)
    try:
        payload = json.loads(body, parse_constant=_no_constant)
    except RecursionError:
        raise BadPayload(f"body is nested deeper than {MAX_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadPayload(f"body is not JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise BadPayload("body must be a JSON object")
    _check_document(payload)
    return payload


def _form_payload(body: bytes) -> bytes:
    try:
        fields = parse_qs(body.decode("ascii"), strict_parsing=True, errors="strict", max_num_fields=16)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadPayload(f"form body is not URL-encoded: {exc}") from None
    values = fields.get("payload", [])
    if len(values) != 1:
        raise BadPayload("form body must carry exactly one payload field")
    return values[0].encode("utf-8", "surrogatepass")


def _check_document(payload: dict[str, Any]) -> None:
    """Depth and string checks, iteratively: the document may be as deep as the decoder allowed."""
    stack: list[tuple[Any, str, int]] = [(payload, "", 1)]
    while stack:
        value, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise BadPayload(f"body is nested deeper than {MAX_DEPTH} levels (at {path})")
        children: Any = value.items() if isinstance(value, dict) else enumerate(value)
        for key, child in children:
            where = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and SURROGATE.search(key):
                raise BadPayload(f"payload key {_printable(where)} contains a lone surrogate")
            if isinstance(child, str) and SURROGATE.search(child):
                raise BadPayload(f"payload field {_printable(where)} contains a lone surrogate")
            if isinstance(child, dict | list):
                stack.append((child, where, depth + 1))


def _printable(path: str) -> str:
    return SURROGATE.sub("\ufffd", path)[:200]
