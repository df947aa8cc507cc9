"""Artifact directory names for pytest node ids (shared by the suites and the service; imports nothing)."""

from __future__ import annotations

import hashlib
import re

MAX_NAME = 120


def sanitise_nodeid(nodeid: str) -> str:
    """A file-system-safe, stable name for a node id; long or lossy names get a short hash for uniqueness."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", nodeid.replace("::", "__")).strip("._-") or "test"
    if len(name) > MAX_NAME or name != nodeid.replace("::", "__"):
        digest = hashlib.sha256(nodeid.encode()).hexdigest()[:8]
        name = f"{name[:MAX_NAME]}-{digest}"
    return name
