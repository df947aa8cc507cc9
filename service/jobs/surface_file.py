"""The job's `surface.json`: the compiler fingerprint it measured at run time (suites/compiler_surface.py), written
by the job, so read as untrusted data: bounded, without following links, checked for shape. A fingerprint only
ever decides whether this job's own reused results hold (service/planning/reuse_check.py)."""

from __future__ import annotations

import re
from pathlib import Path

from runners.untrusted_files import read_json_data

SURFACE_FILE = "surface.json"
MAX_SURFACE_BYTES = 4 * 1024 * 1024
FINGERPRINT = re.compile(r"[0-9a-z-]{0,120}")  # "" (nothing changed) or a hash; anything else is not ours


def read_fingerprint(out: Path) -> str | None:
    """The fingerprint ("" when the repository changed nothing in the compiler); None when the file is missing,
    malformed or not what the suites write: unsure, so nothing is reused on its word."""
    try:
        data = read_json_data(out, SURFACE_FILE, MAX_SURFACE_BYTES)
    except (OSError, ValueError, RecursionError):
        return None
    # `reuse` (what reused results are checked by: without installed requirements' own patches, which run or not with
    # the tests a shard runs); a job of an older suites version wrote only `fingerprint`.
    key = "reuse" if isinstance(data, dict) and "reuse" in data else "fingerprint"
    value = data.get(key) if isinstance(data, dict) else None
    return value if isinstance(value, str) and FINGERPRINT.fullmatch(value) else None


def agreed(fingerprints: list[str | None]) -> str | None:
    """One fingerprint for a job run as shards: theirs when all measured the same, else unsure."""
    found = set(fingerprints)
    return found.pop() if len(found) == 1 else None
