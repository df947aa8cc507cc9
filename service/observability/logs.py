"""Structured logs: one JSON object per line, carrying the ids that let one job be followed across processes.

The ids live in context variables: the web binds the delivery id per request, a worker binds run id, job id and
attempt per task, so every line logged meanwhile (ours, Celery's, PyGithub's) carries them without being passed.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

FIELDS = ("delivery_id", "event", "run_id", "job_id", "attempt", "task")
LOG_FORMATS = ("text", "json")
_context: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("compile_ci_log", default=None)


def bind(**fields: Any) -> None:
    """Add ids to the current context (a request, a task); empty values are left out."""
    _context.set({**(_context.get() or {}), **{k: v for k, v in fields.items() if v not in (None, "")}})


def clear() -> None:
    """Start a request or task with no ids: a thread serves many, one after the other."""
    _context.set(None)


def current() -> dict[str, Any]:
    return dict(_context.get() or {})


class ContextFilter(logging.Filter):
    """Copies the bound ids onto each record (as attributes), so any formatter can show them."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in current().items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
        }
        for key in FIELDS:
            value = getattr(record, key, None)
            if value not in (None, ""):
                line[key] = value
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure_logging(log_format: str, role: str) -> None:
    """json: the root logger writes JSON lines to stderr (our handler only: configured once per process)."""
    root = logging.getLogger()
    if log_format != "json" or any(getattr(h, "compile_ci", False) for h in root.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.compile_ci = True  # type: ignore[attr-defined]
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter())
    # One format per stream: another handler on the root (a test runner's, a default one) would repeat each line.
    for other in list(root.handlers):
        root.removeHandler(other)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.getLogger("service").info("logging as JSON lines (%s)", role)
