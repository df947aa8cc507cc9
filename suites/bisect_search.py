"""One failing test bisected in the job's own process: confirmed wrong once more, its suspect pair (the repository's
compiler changes taken out), torch's search across backends and subsystems, and the answer checked before it is told.

Every step runs the test again and asks its own judgement (suites/bisect_probe.py). The answer is told only when it
holds: the culprit point run again is wrong and the point just before it right; a test that turns right when run
again, or whose answer does not hold, is *flaky*; time running out is *budget*; a test whose compiled step does not
go through torch.compile's backends is *unbisectable*. None of them names a culprit: a bisection never guesses.
"""

from __future__ import annotations

import contextlib
import io
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field

import pytest

from suites import alarm, bisect_torch
from suites.bisect_probe import RIGHT, UNJUDGED, WRONG, Expired, Replay, expire, finish, replay
from suites.bisect_suspects import Suspect, suspect

NOT_COMPILED = ("run again, no graph of it went through a torch.compile backend, so torch's bisector cannot steer it "
                "(it keeps compiled results from its first run, or makes its compiled step another way, such as "
                "functorch's memory_efficient_fusion)")
FOUND, FLAKY, BUDGET, UNBISECTABLE, INCONCLUSIVE, UNAVAILABLE = (
    "found", "flaky", "budget", "unbisectable", "inconclusive", "unavailable")


@dataclass
class Finding:
    status: str
    backend: str = ""  # the first backend of torch.compile's that is wrong
    subsystem: str = ""  # the subsystem of it whose disabling makes the test right
    number: int | None = None  # the application of it that turns the result wrong (0-based, as torch counts)
    names: list[str] = field(default_factory=list)  # what torch names there: a pass, an FX node and its op
    reason: str = ""  # why there is no culprit (flaky, budget, ...), in a sentence
    replay: str = ""  # the TORCH_BISECT_* variables that compile at the culprit point
    runs: int = 0
    seconds: float = 0.0
    suspect: Suspect | None = None

    def as_json(self) -> dict[str, object]:
        found = {k: v for k, v in asdict(self).items() if k != "suspect"}
        return {**found, "seconds": round(self.seconds, 2),
                "suspect": self.suspect.as_json() if self.suspect is not None else None}


class OutOfTime(Exception):
    pass


class Stop(Exception):
    """The search cannot go on: ``status`` and ``reason`` say why."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


class Budget:
    """Seconds left for bisecting, shared by the job's failing tests."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        return self.deadline - time.monotonic()

    @contextlib.contextmanager
    def alarm(self) -> Iterator[None]:
        """The hard stop: a run still going at the deadline is abandoned (the soft check below starts none that
        is not expected to fit)."""
        if self.left() <= 0:
            raise OutOfTime
        previous = signal.signal(signal.SIGALRM, alarm.handler(expire))  # never inside an import (suites/alarm.py)
        signal.setitimer(signal.ITIMER_REAL, self.left())
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


class Search:
    def __init__(self, item: pytest.Item, budget: Budget, log: Callable[[str], None]) -> None:
        self.item, self.budget, self.log = item, budget, log
        self.runs, self.slowest, self.reused = 0, 0.0, 0
        self.asked: dict[tuple[str, str, str], bool] = {}
        self.pair: Suspect | None = None

    def run(self, label: str) -> Replay:
        if self.budget.left() < self.slowest:
            raise OutOfTime
        found = replay(self.item)
        self.runs += 1
        self.slowest = max(self.slowest, found.seconds)
        said = f": {found.said}" if found.outcome == UNJUDGED else ""
        self.log(f"run {self.runs}, {label}: {found.outcome} ({found.seconds:.1f} s; {found.graphs} graph(s) "
                 f"compiled, {found.inductor} by inductor){said}")
        return found

    def step(self) -> bool:
        """torch's search asks: is the test right at the point the bisector is at now?"""
        backend, subsystem = bisect_torch.current_point()
        state = bisect_torch.run_state(backend, subsystem)
        key = (backend, subsystem, state)
        if key in self.asked and state in ("", "test_disable"):  # torch's search walks some points twice
            self.reused += 1
            return self.asked[key]
        found = self.run(_label(backend, subsystem, state))
        if found.graphs == 0 and found.outcome != UNJUDGED:
            raise Stop(UNBISECTABLE, NOT_COMPILED)
        if backend != bisect_torch.INDUCTOR and found.inductor:
            raise Stop(UNBISECTABLE, f"asked for the {backend} backend, it still compiled {found.inductor} graph(s) "
                                     "with inductor (a compiled function made before the bisection, or inductor "
                                     "called directly), so torch's bisector cannot steer it")
        # Failing before its judgement (a crash where a subsystem is off, a check of its own under another backend)
        # is not right, as for torch's own bisector; the answer's check below says when it is all there is.
        self.asked[key] = found.outcome == RIGHT
        return self.asked[key]


class _Said(io.StringIO):
    """What torch's bisector prints, line by line into the log, between the runs it asks for."""

    def __init__(self, log: Callable[[str], None]) -> None:
        super().__init__()
        self.log = log

    def write(self, text: str) -> int:
        for line in text.splitlines():
            if line.strip():
                self.log(f"  torch: {line.strip()}")
        return len(text)


def _label(backend: str, subsystem: str, state: str) -> str:
    if not subsystem:
        return f"backend {backend}"
    if state == "test_disable":
        return f"{backend} without {subsystem}"
    if state == "find_max_bounds":
        return f"{backend}, counting the applications of {subsystem}"
    low, high = bisect_torch.bisector().get_bisect_range(backend, subsystem)
    return f"{backend}, {subsystem} applied #0..#{(low + high) // 2} (searching #{low}..#{high})"


def bisect(item: pytest.Item, budget: Budget, log: Callable[[str], None]) -> Finding:
    """Bisect one failing test within ``budget``; what it did, step by step, goes to ``log``."""
    started = time.monotonic()
    search = Search(item, budget, log)
    finding = Finding(UNAVAILABLE, reason=bisect_torch.unavailable())
    try:
        if not finding.reason:
            with budget.alarm():
                finding = _bisect(search)
    except (OutOfTime, Expired):
        finding = Finding(BUDGET, reason=f"the job's time for bisecting ran out after {search.runs} run(s) of this "
                                         "test: no culprit is named")
    finally:
        finish(item)
    finding.runs, finding.seconds = search.runs, time.monotonic() - started
    # The suspect pair is told whatever became of the search, but not for a flaky test: one run of it proves nothing.
    finding.suspect = None if finding.status == FLAKY else finding.suspect or search.pair
    return finding


def _bisect(search: Search) -> Finding:
    first = search.run("as the test ran")
    if first.outcome == RIGHT:
        return Finding(FLAKY, reason="run again, its judgement found nothing wrong")
    if first.outcome == UNJUDGED:
        return Finding(INCONCLUSIVE, reason=f"run again, it failed before its judgement: {first.said}")
    if first.graphs == 0:
        return Finding(UNBISECTABLE, reason=NOT_COMPILED)
    pair, _run = suspect(search.item, lambda item: search.run("with the repository's compiler changes taken out"),
                         search.log)
    search.pair = pair
    search.log(f"suspect: {pair.verdict}: {pair.said}")
    try:
        result = bisect_torch.do_bisect(search.step, _Said(search.log))
    except Stop as stop:
        return Finding(stop.status, reason=stop.reason, suspect=pair)
    except RuntimeError as exc:  # torch's search found its own upper bound right: the test changed its mind
        return Finding(FLAKY, reason=f"torch's bisector gave up: {exc}"[:400])
    finally:
        if search.reused:
            search.log(f"({search.reused} of torch's questions were points it had asked before: answered from "
                       "those runs)")
    if result is None:
        return Finding(FLAKY, reason="wrong as the test ran, right under every backend of torch's bisector "
                                     "(inductor included)")
    return _checked(search, result, pair)


def _checked(search: Search, result: object, pair: Suspect) -> Finding:
    """The answer run again at its point (wrong) and just before it (right); told only if both hold."""
    backend, name = str(getattr(result, "backend", "")), str(getattr(result, "subsystem", "") or "")
    subsystem = {s.name: s for s in bisect_torch.subsystems(backend)}.get(name)
    number = getattr(result, "bisect_number", None) if subsystem is not None and subsystem.applied else None
    finding = Finding(FOUND, backend, name, number, suspect=pair)
    if number is not None:
        with bisect_torch.naming(backend, name, number) as named, bisect_torch.at_point(backend, name, number):
            wrong = search.run(f"check: {backend}, {name} applied #0..#{number}")
        with bisect_torch.at_point(backend, name, number - 1):
            right = search.run(f"check: {backend}, {name} applied #0..#{number - 1}" if number else
                               f"check: {backend}, {name} never applied")
        debug = getattr(result, "debug_info", None)
        finding.names = named.said or ([str(debug)] if debug else [])
        search.log(f"torch names application #{number} of {name}: {', '.join(finding.names) or 'nothing'}")
        finding.replay = f"TORCH_BISECT_BACKEND={backend} TORCH_BISECT_SUBSYSTEM={name} TORCH_BISECT_MAX={number}"
    else:
        before = _before(backend)
        if subsystem is not None:  # a config setting: right with it changed, wrong without
            with bisect_torch.at_point(backend, name):
                right = search.run(f"check: {backend} with {name} changed")
        elif before:
            with bisect_torch.at_point(before):
                right = search.run(f"check: backend {before}")
        else:
            right = None
        with bisect_torch.at_point(backend):
            wrong = search.run(f"check: backend {backend}")
        finding.replay = f"TORCH_BISECT_BACKEND={backend}"
    for run, where in ((wrong, "where"), (right, "and just before it")):
        if run is not None and run.outcome == UNJUDGED:
            return Finding(INCONCLUSIVE, reason=f"torch's bisector pointed at {_point(finding)}, {where} the test "
                                                f"fails before its judgement: {run.said}", suspect=pair)
    if wrong.outcome != WRONG or (right is not None and right.outcome != RIGHT):
        return Finding(FLAKY, reason=f"torch's bisector pointed at {_point(finding)}, but run again there the test "
                                     f"was {wrong.outcome}" + (f" and just before it {right.outcome}" if right else ""))
    return finding


def _before(backend: str) -> str:
    order = bisect_torch.backends()
    return order[order.index(backend) - 1] if backend in order and order.index(backend) > 0 else ""


def _point(finding: Finding) -> str:
    number = f" #{finding.number}" if finding.number is not None else ""
    return f"{finding.backend}" + (f" · {finding.subsystem}{number}" if finding.subsystem else "")
