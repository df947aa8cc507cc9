"""Where a failure happened (pure): the deepest traceback frame in the repository's own code, else the test."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from service.github.markdown import clean, clip, plain_title

MAX_PER_REQUEST = 50  # GitHub: "a maximum of 50 per API request"; more go in later PATCHes, which append
MAX_ANNOTATIONS = 250  # beyond this the summary and the job page say it better than 250 red markers
# GitHub: message and raw_details "The maximum size is 64 KB", counted in bytes; title at most 255 characters.
MESSAGE_BYTES = 64_000
TITLE_LIMIT = 255
# pytest's long tracebacks name each frame as `path/to/file.py:LINE: ...` at the start of a line; Python's own
# (inside a failure's text) as `File "path", line N`.
_PYTEST_FRAME = re.compile(r"^(?P<path>[^\s:][^:\n]*\.py):(?P<line>\d+):", re.MULTILINE)
_PYTHON_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+\.py)", line (?P<line>\d+)', re.MULTILINE)


def locate_in_checkout(details: str, roots: Sequence[str], exists: Callable[[str], bool]) -> tuple[str, int] | None:
    """(path relative to the repository, line) of the last frame inside the checkout, if any.

    `roots` are the absolute paths the checkout had where the tests ran (the host path, and the container's
    when a container runner mounts it elsewhere); `exists(rel)` tells a relative frame that names a file of
    the repository from one in the suite or the standard library.
    """
    frames = sorted([*_PYTEST_FRAME.finditer(details), *_PYTHON_FRAME.finditer(details)], key=lambda m: m.start())
    found = None
    for match in frames:
        rel = _relative(match["path"], roots, exists)
        if rel is not None:
            found = (rel, int(match["line"]))
    return found


def declared_target(value: str, exists: Callable[[str], bool]) -> tuple[str, int] | None:
    """The `path:line` the suites recorded for a failing test's declared target (the class or function named in
    [targets]), if it names a file of the checkout. The job wrote it, so it is checked like any untrusted text."""
    match = re.fullmatch(r"(?P<path>[\w./-]+\.py):(?P<line>\d{1,7})", value.strip())
    if match is None or match["path"].startswith("/") or ".." in match["path"].split("/"):
        return None
    return (match["path"], int(match["line"])) if exists(match["path"]) else None


def _relative(path: str, roots: Sequence[str], exists: Callable[[str], bool]) -> str | None:
    if path.startswith("/"):
        for root in roots:
            prefix = root.rstrip("/") + "/"
            if root and path.startswith(prefix):
                return path[len(prefix):]
        return None
    clean = path.removeprefix("./")
    return clean if not clean.startswith("..") and "site-packages" not in clean and exists(clean) else None


def annotation(path: str, line: int | None, title: str, message: str, raw_details: str = "",
               level: str = "failure") -> dict[str, Any]:
    """GitHub shows an annotation's title, message and details as plain text, not Markdown: nothing is escaped
    (a backslash would be shown), only control characters are dropped and each field is cut to GitHub's limit."""
    line = line or 1
    note = {"path": clip(clean(path), 1000), "start_line": line, "end_line": line, "annotation_level": level,
            "title": plain_title(title, TITLE_LIMIT), "message": clip(clean(message), MESSAGE_BYTES) or "failed"}
    details = clip(clean(raw_details), MESSAGE_BYTES)
    return note | ({"raw_details": details} if details else {})
