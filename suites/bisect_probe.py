"""What a run of a test judged, and a test run again in the same process: the question a bisection asks at every step.

The question is the test's own compiled-vs-eager judgement, by the suites' own rule: ``suites.judging``'s
``differences_from_reference`` (which ``assert_close_to_reference`` and every suite's declared-model judgement call),
the ops sweep's ``comparison.difference``, and ``torch.testing.assert_close`` where a test compares compiled and eager
exactly (the autograd suite's mutation checks). They are watched, not copied: each is wrapped where the suites call it
(its module, and every module that imported it by name), and the wrapper calls it and notes whether it found a
difference (what a preliminary judgement finds, ``judging.preliminary``, made only to decide whether to measure the
rounding noise, is not counted: the judgement after the measurement decides; that it judged is). A run is *wrong*
when a judgement found one and the test failed, *right* when its judgements found none or the test did not fail (an
expected upstream failure of the sweep), and *unjudged* when the test failed before any judgement (under a backend it
was not written for, a check of its own can fail first): a bisection never counts that as either.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from suites import bisect_torch

# (module, function, whether its result says "differs"): the suites' judgements, as the suites call them. The
# exact comparisons of the autograd suite (and a repository's tests) are torch.testing.assert_close, which raises.
# fail_on_differences too (its problems, not its result): every suite's red goes through it, so the judgement is
# seen even where a suite's helper found its differences another way.
JUDGEMENTS: tuple[tuple[str, str, Callable[[Any], bool]], ...] = (
    ("suites.judging", "differences_from_reference", bool),
    ("suites.judging", "fail_on_differences", lambda _returned: False),
    ("suites.ops.comparison", "difference", lambda found: found is not None),
    ("torch.testing", "assert_close", lambda _returned: False),
)
WRONG, RIGHT, UNJUDGED = "wrong", "right", "unjudged"
_MARK = "__compile_ci_judgement__"


@dataclass
class Judged:
    calls: int = 0
    differed: int = 0


_watching: list[Judged] = []
_replaying = False


def replaying() -> bool:
    """Whether a test is being run again for a bisection (the artifacts plugin then writes nothing of it)."""
    return _replaying


def _watched(judgement: Callable[..., Any], differs: Callable[[Any], bool]) -> Callable[..., Any]:
    @functools.wraps(judgement)
    def judged(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True  # the test's failure shows where the test judged, not this wrapper
        if judgement.__name__ == "fail_on_differences":
            _note(bool(args[0] if args else kwargs.get("problems")))
            return judgement(*args, **kwargs)
        try:
            found = judgement(*args, **kwargs)
        except AssertionError:  # assert_close's way of saying "differs"
            _note(True)
            raise
        _note(bool(differs(found)))
        return found

    setattr(judged, _MARK, judgement)
    return judged


def _note(differed: bool) -> None:
    judging = sys.modules.get("suites.judging")
    if judging is not None and judging.is_preliminary():
        differed = False  # a judgement, but its difference only asks for the noise: the judgement after it decides
    for seen in _watching:
        seen.calls += 1
        seen.differed += differed


def install() -> None:
    """Wrap each judgement of a module imported by now, in its module and wherever it was bound by name. Called
    again after collection: the test modules import their judgements then (importing one here would import what
    it needs early: the ops sweep's torch testing internals change cuDNN's flags)."""
    for module_name, name, differs in JUDGEMENTS:
        module = sys.modules.get(module_name)
        current = getattr(module, name, None) if module is not None else None
        if current is None:
            continue
        original = getattr(current, _MARK, current)
        wrapped = current if hasattr(current, _MARK) else _watched(original, differs)
        for loaded in list(sys.modules.values()):
            try:  # whatever a package put in sys.modules (lazy modules, proxies)
                namespace = vars(loaded)
                for key, value in list(namespace.items()):
                    if value is original:
                        namespace[key] = wrapped
            except Exception:  # noqa: BLE001, S112 - not a module we could rebind in: it cannot call the judgement
                continue


@contextlib.contextmanager
def watching() -> Iterator[Judged]:
    seen = Judged()
    _watching.append(seen)
    try:
        yield seen
    finally:
        _watching.remove(seen)


def outcome_of(seen: Judged, failed: bool) -> str:
    if seen.differed and failed:
        return WRONG
    return RIGHT if seen.calls or not failed else UNJUDGED


@dataclass(frozen=True)
class Replay:
    outcome: str  # WRONG | RIGHT | UNJUDGED
    seconds: float
    graphs: int  # graphs dynamo handed to a torch.compile backend
    inductor: int  # graphs inductor compiled
    said: str  # the test's failure, first line (what an unjudged run failed with)


class Expired(Exception):
    """The time given to bisecting ran out in the middle of a run."""


_expired = False


def expire() -> None:
    """From the budget's alarm: the run in progress counts for nothing (pytest reports what it raises as the
    test's failure, so this flag, not the exception, tells the replay)."""
    global _expired
    _expired = True
    raise Expired("the bisection's time ran out")


def replay(item: pytest.Item) -> Replay:
    """Run ``item`` again (setup, call, teardown), its fixtures wider than the test kept for the next replay, with
    the compile caches off; nothing of it is logged or written as the test's artifacts."""
    from _pytest.runner import runtestprotocol

    global _replaying, _expired
    started = time.monotonic()
    bisect_torch.reset()  # the repository's own tests do not reset dynamo between tests as the suites do
    _replaying, _expired = True, False
    try:
        with watching() as seen, bisect_torch.counting_compiles() as compiles, bisect_torch.uncached():
            # The session as the next "item": the test's own and its module's fixtures are torn down (a module
            # may keep compiled results in a module-scoped fixture), the session's kept for the next run.
            reports = runtestprotocol(item, log=False, nextitem=item.session)  # type: ignore[arg-type]
    finally:
        _replaying = False
    if _expired:
        raise Expired("the bisection's time ran out during a run")
    failed = [report for report in reports if report.failed]
    said = _first_line(failed[0]) if failed else ""
    return Replay(outcome_of(seen, bool(failed)), time.monotonic() - started, compiles.graphs, compiles.inductor,
                  said)


def finish(item: pytest.Item) -> None:
    """Tear down what the replays of ``item`` kept set up (session and module fixtures too)."""
    state = getattr(item.session, "_setupstate", None)
    if state is not None:
        state.teardown_exact(None)


def _first_line(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = str(crash.message if crash is not None else report.longrepr)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[0] if lines else "failed")[:300]
