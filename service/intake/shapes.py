"""GitHub's shapes for the payload fields we use: a delivery that breaks one is refused before anything is stored.

The rules follow what GitHub itself can send (a sha is 40 lowercase hex digits, an owner is at most 39 letters,
digits and hyphens, ...). Anything else did not come from GitHub, so it must not make a run, cancel one, or reach
code that assumes those shapes (run ids are hashes of the repository name and sha).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

MAX_ID = 2**63 - 1  # GitHub's ids are 64-bit
# These are stored in INTEGER columns, 32-bit in PostgreSQL: a larger number would fail the insert.
MAX_STORED = 2**31 - 1
STORED = {"repository.id", "installation.id", "number", "issue.number"}

SHA = re.compile(r"[0-9a-f]{40}")
# Owners: users and organisations. Old accounts may carry hyphens GitHub no longer allows, so hyphens are free
# after the first character; apps comment as "<slug>[bot]".
OWNER = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,38}")
LOGIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,38}(\[bot\])?")
REPO_NAME = re.compile(r"[A-Za-z0-9._-]{1,100}")
URL = re.compile(r"https?://[!-~]{1,2040}")  # printable ASCII, no spaces
# git check-ref-format, less what GitHub never sends: no control characters, spaces or ~^:?*[\, no "..", "@{",
# "//", no component starting with "." or ending with ".lock", and GitHub's own 255-byte cap.
REF_FORBIDDEN = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|//|/\.|\.lock(/|$)")
TEXT = re.compile(r"[!-~]{0,255}")  # short identifiers GitHub makes of printable ASCII (maybe empty)


def _sha(value: Any) -> str | None:
    return None if SHA.fullmatch(value) else "is not a 40-digit lowercase hex commit sha"


def _full_name(value: Any) -> str | None:
    owner, slash, name = value.partition("/")
    if slash and OWNER.fullmatch(owner) and REPO_NAME.fullmatch(name) and name not in (".", ".."):
        return None
    return "is not a GitHub repository name (owner/name)"


def _login(value: Any) -> str | None:
    return None if LOGIN.fullmatch(value) else "is not a GitHub login"


def _ref(value: Any) -> str | None:
    raw = value.encode("utf-8", "surrogatepass")
    if not value or len(raw) > 255 or value.startswith(("/", ".", "-")) or value.endswith(("/", ".")) \
            or value == "@" or REF_FORBIDDEN.search(value):
        return "is not a git ref name"
    return None


def _url(value: Any) -> str | None:
    return None if URL.fullmatch(value) else "is not an http(s) URL"


def _text(value: Any) -> str | None:
    return None if TEXT.fullmatch(value) else "is not up to 255 printable ASCII characters"


def _positive_id(value: Any, most: int = MAX_ID) -> str | None:
    return None if 0 < value <= most else f"is not a number between 1 and {most}"


# By the last part of the dotted path: GitHub uses these names with one meaning across its events.
STRING_RULES: dict[str, Callable[[Any], str | None]] = {
    "sha": _sha, "head_sha": _sha, "after": _sha, "before": _sha,
    "full_name": _full_name,
    "login": _login,
    "ref": _ref, "default_branch": _ref,
    "clone_url": _url,
    "external_id": _text, "identifier": _text, "type": _text,
}
INT_RULES: dict[str, Callable[[Any], str | None]] = {"id": _positive_id, "number": _positive_id}


def shape_problem(dotted: str, value: Any) -> str | None:
    """Why `value` cannot be GitHub's `dotted` field, or None when it fits (fields without a rule always fit)."""
    last = dotted.rsplit(".", 1)[-1]
    if isinstance(value, str):
        rule = STRING_RULES.get(last)
    elif isinstance(value, int) and not isinstance(value, bool):
        if dotted in STORED:
            return _positive_id(value, MAX_STORED)
        rule = INT_RULES.get(last)
    else:
        rule = None
    return rule(value) if rule else None


def repository_name_problem(value: Any) -> str | None:
    """For repository lists (installation events), which the handlers read without `field`."""
    return "is not a string" if not isinstance(value, str) else _full_name(value)
