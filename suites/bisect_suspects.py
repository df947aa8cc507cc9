"""The repository's own compiler change as a suspect: the failing test run again with torch's own compiler put back.

``compiler_surface.changes()`` lists what the repository changed in torch's compiler packages (the compiler
fingerprint's baseline against what runs now), ``compiler_surface.restored()`` puts torch's own objects back for its
duration. Right with them back: "red only with your change to <place> (file:line)". Still wrong: "red on stock torch
too" (upstream; whether the base fails it too is the service's to say), unless some change could not be taken out
in-process (an entry of torch's pattern passes changed in place, torch's files, native code): then stock torch was not
tried, and the pair says so, naming that change ("inseparable"), never "upstream". A run that cannot judge says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from suites import compiler_surface
from suites.bisect_probe import RIGHT, WRONG, Replay

YOURS, UPSTREAM, UNKNOWN, INSEPARABLE = "yours", "upstream", "unknown", "inseparable"
MAX_LISTED = 5
MAX_LOGGED = 50


@dataclass(frozen=True)
class Suspect:
    verdict: str  # YOURS | UPSTREAM | UNKNOWN | INSEPARABLE
    count: int  # the repository's changes to torch's compiler the fingerprint saw
    changes: tuple[tuple[str, str], ...] = ()  # (place, file:line) of the first MAX_LISTED
    said: str = ""

    def as_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "count": self.count,
                "changes": [{"place": place, "where": where} for place, where in self.changes], "said": self.said}


def suspect(item: pytest.Item, replay: Callable[[pytest.Item], Replay],
            log: Callable[[str], None] = lambda line: None) -> tuple[Suspect, Replay | None]:
    """The test judged once more with every change of the repository's to torch's compiler taken out; each change
    goes to ``log`` (at most MAX_LOGGED)."""
    try:
        changes = list(compiler_surface.changes())
    except Exception as exc:  # noqa: BLE001 - the fingerprint's own trouble must not cost the bisection
        return Suspect(UNKNOWN, 0, said=f"the repository's compiler changes could not be listed: {exc!r}"[:300]), None
    for change in changes[:MAX_LOGGED]:
        log(f"the repository's change to torch's compiler: {change.place} ({change.kind}) {change.where}".rstrip())
    if len(changes) > MAX_LOGGED:
        log(f"… and {len(changes) - MAX_LOGGED} more")
    listed = tuple((str(c.place), str(c.where)) for c in changes[:MAX_LISTED])
    if not changes:
        return Suspect(UPSTREAM, 0, said="red on stock torch: the repository changes nothing in torch's compiler"), None
    with compiler_surface.restored() as kept:
        run = replay(item)
    count = len(changes)
    removed = f"{count} change{'s' if count != 1 else ''} of the repository's to torch's compiler"
    if run.graphs == 0:
        return Suspect(UNKNOWN, count, listed, f"with the {removed} taken out the test compiled nothing"), run
    if run.outcome == RIGHT:
        return Suspect(YOURS, count, listed, f"right with the {removed} taken out"), run
    if run.outcome == WRONG and kept:
        # Not stock torch: what could not be taken out ran too. Those changes first, so the first listed is one.
        first = tuple((str(c.place), str(c.where)) for c in kept)
        listed = (first + tuple(pair for pair in listed if pair not in first))[:MAX_LISTED]
        said = (f"still wrong with {count - len(kept)} of the {removed} taken out; {len(kept)} cannot be taken out "
                f"in-process ({kept[0].place}), so stock torch was not tried")
        return Suspect(INSEPARABLE, count, listed, said[:300]), run
    if run.outcome == WRONG:
        said = f"still wrong with the {removed} taken out: red on stock torch too"
        return Suspect(UPSTREAM, count, listed, said), run
    return Suspect(UNKNOWN, count, listed, f"with the {removed} taken out the test failed before its judgement: "
                   f"{run.said}"), run


def blamed(suspect: Suspect, names: Sequence[str]) -> tuple[str, str] | None:
    """The change a culprit points at: the one whose place names the op or pass torch's bisector named, else the
    only change there is; None when neither tells one change apart."""
    if suspect.verdict != YOURS or not suspect.changes:
        return None
    named = [(place, where) for place, where in suspect.changes if any(n and n in place for n in names)]
    if len(named) == 1:
        return named[0]
    return suspect.changes[0] if suspect.count == 1 else None
