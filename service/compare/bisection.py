"""A failing test's bisection, as the job left it (suites/bisect_session.py: `bisect.json` and `bisect.log` beside the
test's other artifacts), and its one line for the check run, the pull-request comment and the test page.

The job wrote both files: they are read bounded and without following links (runners/untrusted_files.py), every
field is checked for its type, shape and size, and one that fails makes the whole file no bisection (a forged culprit
is worse than none). The words are the job's: each sink escapes them (GitHub markdown here, HTML in the templates).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from runners.untrusted_files import read_head, read_json_data
from service.github.markdown import code_span, plain
from suites.naming import sanitise_nodeid

RESULT_FILE, LOG_FILE = "bisect.json", "bisect.log"
MAX_RESULT_BYTES = 64 * 1024
MAX_LOG_SHOWN = 256 * 1024
STATUS_WORDS = {"found": "", "flaky": "bisection flaky", "budget": "not bisected in time",
                "unbisectable": "not bisectable", "inconclusive": "bisection inconclusive",
                "unavailable": "no bisector in this torch"}
SUSPECTS = ("yours", "upstream", "unknown", "inseparable")
_NAME = re.compile(r"[A-Za-z0-9_]{1,64}")  # a backend or a subsystem of torch's bisector
_WHERE = re.compile(r"[^\s:`]{1,300}:[0-9]{1,7}")  # file:line of the repository's code
_REPLAY = re.compile(r"(TORCH_BISECT_[A-Z]{1,10}=[A-Za-z0-9_-]{1,64} ?){1,3}")
MAX_TEXT, MAX_NAMES, MAX_LISTED = 400, 4, 5


@dataclass(frozen=True)
class Bisection:
    status: str  # a key of STATUS_WORDS
    backend: str = ""
    subsystem: str = ""
    number: int | None = None  # the application of the subsystem (0-based, as torch counts)
    names: tuple[str, ...] = ()  # what torch names there: a pass, an FX node, an op
    reason: str = ""
    suspect: str = ""  # yours | upstream | unknown | inseparable | "" (not asked)
    changes: int = 0  # the repository's changes to torch's compiler the job saw
    listed: tuple[tuple[str, str], ...] = ()  # (place, file:line) of the first few
    place: str = ""  # the one change it points at, and where the repository made it
    where: str = ""
    replay: str = ""  # TORCH_BISECT_* variables that compile at the culprit point

    @property
    def found(self) -> bool:
        return self.status == "found"


class Invalid(ValueError):
    pass


def _text(value: object, limit: int = MAX_TEXT) -> str:
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > limit:
        raise Invalid("not a short string")
    return value


def _matching(value: object, pattern: re.Pattern[str]) -> str:
    text = _text(value)
    if text and not pattern.fullmatch(text):
        raise Invalid(f"{text[:40]!r} is not the shape the suites write")
    return text


def parse(data: object) -> Bisection:
    """A bisection from bisect.json's data; Invalid for anything the suites would not have written."""
    if not isinstance(data, dict) or data.get("status") not in STATUS_WORDS:
        raise Invalid("not a bisection")
    number = data.get("number")
    if number is not None and (not isinstance(number, int) or isinstance(number, bool) or not 0 <= number < 10**9):
        raise Invalid("number")
    names = data.get("names") or []
    if not isinstance(names, list) or len(names) > 16:
        raise Invalid("names")
    suspect = data.get("suspect") or {}
    if not isinstance(suspect, dict) or suspect.get("verdict", "") not in ("", *SUSPECTS):
        raise Invalid("suspect")
    count = suspect.get("count", 0)
    listed = suspect.get("changes") or []
    if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count < 10**6 or not isinstance(listed, list):
        raise Invalid("changes")
    return Bisection(
        status=data["status"], backend=_matching(data.get("backend"), _NAME),
        subsystem=_matching(data.get("subsystem"), _NAME), number=number,
        names=tuple(_text(name, 200) for name in names[:MAX_NAMES]), reason=_text(data.get("reason")),
        suspect=str(suspect.get("verdict", "")), changes=count,
        listed=tuple((_text(c.get("place"), 300), _matching(c.get("where"), _WHERE)) if isinstance(c, dict)
                     else ("", "") for c in listed[:MAX_LISTED]),
        place=_text(data.get("place"), 300), where=_matching(data.get("where"), _WHERE),
        replay=_matching(data.get("replay"), _REPLAY))


def read_bisection(test_dir: Path) -> Bisection | None:
    """The test's bisection; None when there is none or its file is not one (too big, a link, not the suites')."""
    try:
        return parse(read_json_data(test_dir, RESULT_FILE, MAX_RESULT_BYTES))
    except (OSError, ValueError, RecursionError):  # Invalid is a ValueError
        return None


def read_log(test_dir: Path) -> tuple[str, bool]:
    """The bisection's log as text (its beginning when it is long: True), "" when there is none to show."""
    try:
        raw, size = read_head(test_dir, LOG_FILE, MAX_LOG_SHOWN)
    except OSError:
        return "", False
    return raw.decode("utf-8", errors="replace"), size > MAX_LOG_SHOWN


def read_bisections(tests_dir: Path, nodeids: Iterable[str]) -> dict[str, Bisection]:
    """The bisections of these tests (the failing ones of an attempt) that their job left."""
    found = {}
    for nodeid in nodeids:
        bisection = read_bisection(tests_dir / sanitise_nodeid(nodeid))
        if bisection is not None:
            found[nodeid] = bisection
    return found


def markdown(bisection: Bisection, at_base: bool | None = None) -> str:
    """One line of GitHub markdown: "wrong from `inductor` · `post_grad_passes #17` (`pass_pattern_1`) · red only
    with your change to `place` (`file:line`)". ``at_base``: whether the base fails the test too (None: unknown)."""
    if bisection.found:
        parts = [f"wrong from {code_span(bisection.backend)}"]
        if bisection.subsystem:
            # "#17" outside code would be a link to issue 17 on GitHub: the number stays in the span
            number = f" #{bisection.number}" if bisection.number is not None else ""
            named = ", ".join(code_span(name, limit=120) for name in bisection.names)
            parts.append(code_span(f"{bisection.subsystem}{number}") + (f" ({named})" if named else ""))
    else:
        parts = [plain(f"{STATUS_WORDS[bisection.status]}: {bisection.reason}", inline=True)]
    suspect = _suspect_markdown(bisection, at_base)
    return " · ".join(parts + ([suspect] if suspect else []))


def _suspect_markdown(bisection: Bisection, at_base: bool | None) -> str:
    if bisection.suspect == "yours" and bisection.place:
        where = f" ({code_span(bisection.where)})" if bisection.where else ""
        return f"red only with your change to {code_span(bisection.place, limit=200)}{where}"
    if bisection.suspect == "yours":
        shown = ", ".join(code_span(place, limit=120) for place, _where in bisection.listed[:3] if place)
        more = ", …" if bisection.changes > 3 else ""
        return f"red only with your compiler changes ({bisection.changes}: {shown}{more})"
    if bisection.suspect == "upstream":
        base = "" if at_base is None else ", failing at the base too" if at_base else ", new here"
        return f"red on stock torch too ({_stock_blame(bisection)}{base})"
    if bisection.suspect == "inseparable" and bisection.listed:
        place, where = bisection.listed[0]
        shown = f"{code_span(place, limit=200)}" + (f" ({code_span(where)})" if where else "")
        return f"stock torch not tried: your change to {shown} cannot be taken out in-process"
    return ""


# Wrong already under dynamo's `eager` backend: no compiler stage ran, so what differs is the model's own Python under
# graph capture (state it keeps between calls, say) or dynamo itself, not "upstream" in the compiler.
CAPTURE_ONLY = "under dynamo's capture alone: the model's Python or dynamo"


def _stock_blame(bisection: Bisection) -> str:
    return CAPTURE_ONLY if bisection.found and bisection.backend == "eager" else "upstream"


def text(bisection: Bisection) -> str:
    """The same line as plain text, for the HTML pages (their templates escape it)."""
    if bisection.found:
        line = f"wrong from {bisection.backend}"
        if bisection.subsystem:
            number = f" #{bisection.number}" if bisection.number is not None else ""
            named = f" ({', '.join(bisection.names)})" if bisection.names else ""
            line += f" · {bisection.subsystem}{number}{named}"
    else:
        line = f"{STATUS_WORDS[bisection.status]}: {bisection.reason}"
    if bisection.suspect == "yours":
        line += (f" · red only with your change to {bisection.place} ({bisection.where})" if bisection.place else
                 f" · red only with your compiler changes ({bisection.changes})")
    elif bisection.suspect == "upstream":
        line += f" · red on stock torch too ({_stock_blame(bisection)})"
    elif bisection.suspect == "inseparable" and bisection.listed:
        place, where = bisection.listed[0]
        line += f" · stock torch not tried: your change to {place}" + (f" ({where})" if where else "") + \
            " cannot be taken out in-process"
    return line
