"""INTERIM stand-in for wip/base-pages' service/compare/codediff.py (same interface): take theirs at merge.

Normalised generated code of one test, base against head.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_NOISE = (
    (re.compile(r"/[^\s'\"]*/"), "/…/"),  # paths of the job's machine
    (re.compile(r"\b[0-9a-f]{16,}\b"), "<hash>"),  # cache keys and content hashes
    (re.compile(r"\bc[a-z0-9]{50,}\b"), "<hash>"),  # inductor's module names
)


def normalise(code: str) -> str:
    for pattern, replacement in _NOISE:
        code = pattern.sub(replacement, code)
    return "\n".join(line.rstrip() for line in code.splitlines() if line.strip())


def changed(base_codes: Sequence[str], head_codes: Sequence[str]) -> bool:
    return sorted(map(normalise, base_codes)) != sorted(map(normalise, head_codes))
