"""The job's record of its compiler surface, for the service: `$COMPILE_CI_OUTPUT_DIR/surface.json`, written by
suites/plugin.py at the session's end (format in suites/README.md). The service reads it as untrusted data."""

from __future__ import annotations

import json

from suites import compiler_surface

RECORD_LIMIT, TEXT_LIMIT = 200, 300  # at most this many changes, every string capped


def write_record(path: str) -> None:
    """The fingerprint and at most RECORD_LIMIT changes (`omitted` counts the rest)."""
    found = compiler_surface.changes()
    try:
        fingerprint, reuse = compiler_surface.fingerprint(), compiler_surface.fingerprint(reuse=True)
    except Exception as exc:  # noqa: BLE001 - as refresh_tag: unknown is not "unchanged"
        fingerprint = reuse = f"unknown ({exc!r})"
    record = {"fingerprint": fingerprint[:TEXT_LIMIT], "reuse": reuse[:TEXT_LIMIT],
              "changes": [{"place": c.place[:TEXT_LIMIT], "kind": c.kind, "where": c.where[:TEXT_LIMIT]}
                          for c in found[:RECORD_LIMIT]],
              "omitted": max(0, len(found) - RECORD_LIMIT)}
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=1)
