"""Bisecting a job's compiled-vs-eager failures after its tests ran, in the same process and container, within a
budget (``COMPILE_CI_BISECT_SECONDS``, set by the service; unset or 0: nothing is bisected).

Which failures: every test whose own judgement found compiled and eager apart (suites/bisect_probe.py) and that
failed. The job cannot know which of them are new: the base's results reach the service, not the job, and the base
may still be running. So all are candidates, the slowest first (the ones a maintainer would least like to bisect by
hand; a quick one is bisected locally in seconds with `compile-ci repro --bisect`), each started only when one run of
it fits in what is left; the service shows the answer beside the new failures. A test whose bisection would not fit
says so. Each leaves `bisect.json` (the answer) and `bisect.log` (every run) beside its other artifacts.

Loaded by suites/plugin.py in a job, or with ``-p suites.bisect_session`` (repro.py --bisect), which prints the log.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from suites import bisect_probe, compiler_surface, device_context
from suites.bisect_search import BUDGET, INCONCLUSIVE, UNBISECTABLE, Budget, Finding, bisect
from suites.bisect_suspects import blamed
from suites.naming import sanitise_nodeid

SECONDS_ENV = "COMPILE_CI_BISECT_SECONDS"
DEADLINE_ENV = "COMPILE_CI_DEADLINE"  # epoch seconds at which the runner stops the job (the service sets it)
RESULT_FILE, LOG_FILE = "bisect.json", "bisect.log"
DEADLINE_MARGIN_S = 30.0  # kept for writing the files and ending the process before the runner's limit
MIN_RUNS = 6  # a bisection needs at least this many runs of the test (torch's backends, the checks)
PLUGIN_NAME = "compile-ci-bisect"
NOT_BISECTABLE = "NOT_BISECTABLE"  # a test module's reason its failures cannot be bisected in this process


def budget_from(environ: dict[str, str] | os._Environ[str]) -> float:
    """Seconds to bisect for: COMPILE_CI_BISECT_SECONDS (0 or unset: none), cut short by the job's deadline."""
    raw = environ.get(SECONDS_ENV, "").strip()
    try:
        seconds = float(raw) if raw else 0.0
    except ValueError:
        raise pytest.UsageError(f"{SECONDS_ENV}={raw[:40]!r}: expected seconds, a number >= 0") from None
    deadline = environ.get(DEADLINE_ENV, "").strip()
    if seconds > 0 and deadline:
        try:
            seconds = min(seconds, float(deadline) - time.time() - DEADLINE_MARGIN_S)
        except ValueError:
            raise pytest.UsageError(f"{DEADLINE_ENV}={deadline[:40]!r}: expected epoch seconds") from None
    return seconds if seconds == seconds else 0.0  # NaN: none


@dataclass
class Candidate:
    item: pytest.Item
    seconds: float  # its failing call's duration
    order: int


class BisectSession:
    def __init__(self, output_dir: Path | None, seconds: float) -> None:
        self.output_dir, self.seconds = output_dir, seconds
        self.candidates: dict[str, Candidate] = {}
        self.judged: dict[str, bisect_probe.Judged] = {}
        self.items: dict[str, pytest.Item] = {}

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        bisect_probe.install()  # the test modules have imported the judgements by now

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        if bisect_probe.replaying():
            yield
            return
        with bisect_probe.watching() as seen:
            yield
        self.judged[item.nodeid], self.items[item.nodeid] = seen, item

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        seen = self.judged.get(report.nodeid)
        if report.when != "call" or seen is None:
            return
        if report.failed and bisect_probe.outcome_of(seen, True) == bisect_probe.WRONG:
            self.candidates[report.nodeid] = Candidate(self.items[report.nodeid], report.duration,
                                                       len(self.candidates))
        else:
            self.candidates.pop(report.nodeid, None)

    @pytest.hookimpl(trylast=True)  # after junit.xml is written: a bisection never delays or changes the results
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        try:
            self._bisect_all(session)
        except Exception as exc:  # noqa: BLE001 - pytest's exit status (the job's verdict) is not the bisection's
            self._say(f"the bisection stopped: {type(exc).__name__}: {exc}"[:500])

    def _bisect_all(self, session: pytest.Session) -> None:
        if not self.candidates:
            return
        budget = Budget(self.seconds)
        lost = device_context.lost(session.config)
        order = sorted(self.candidates.values(), key=lambda c: (-c.seconds, c.order))
        self._say(f"bisecting {len(order)} failing test(s), slowest first, within {self.seconds:.0f} s")
        for candidate in order:
            self._progress(candidate.item.nodeid, len(session.items))
            lines: list[str] = [f"bisecting {candidate.item.nodeid} (its failing run took {candidate.seconds:.1f} s)"]
            why = getattr(getattr(candidate.item, "module", None), NOT_BISECTABLE, None)
            if isinstance(why, str):  # a test module that knows it cannot be steered says why (no run is spent)
                finding = Finding(UNBISECTABLE, reason=why)
            elif lost:
                finding = Finding(UNBISECTABLE, reason=f"not bisected: this process lost its device ({lost})")
            elif budget.left() < MIN_RUNS * candidate.seconds or budget.left() <= 0:
                finding = Finding(BUDGET, reason=f"not bisected: {max(budget.left(), 0):.0f} s of the job's "
                                                 f"{self.seconds:.0f} s for bisecting were left, and a bisection runs "
                                                 f"this test at least {MIN_RUNS} times ({candidate.seconds:.1f} s "
                                                 "each); slower failing tests went first")
            else:
                try:
                    finding = bisect(candidate.item, budget, lines.append)
                except Exception as exc:  # noqa: BLE001 - torch's bisector or the test's teardown broke: said, not guessed
                    finding = Finding(INCONCLUSIVE, reason=f"the bisection itself failed: {type(exc).__name__}: "
                                                           f"{exc}"[:400])
            self._record(candidate.item, finding, lines)
        self._progress("", len(session.items))

    def _record(self, item: pytest.Item, finding: Finding, lines: list[str]) -> None:
        nodeid = item.nodeid
        result = {"nodeid": nodeid, **finding.as_json()}
        culprit = blamed(finding.suspect, finding.names) if finding.suspect is not None else None
        result["place"], result["where"] = culprit if culprit is not None else ("", "")
        declared = _declared_pass(item, finding)
        if declared is not None:  # the hook's pass is the repository's: the suite installed it for the test
            result["place"], result["where"] = declared
            result["suspect"] = {"verdict": "yours", "count": 1, "changes": [{"place": declared[0],
                                                                              "where": declared[1]}],
                                 "said": "torch's bisector names a custom-pass hook, which holds what the test "
                                         "installed there"}
        summary = one_line(result)
        lines.append(f"result: {summary}")
        self._say(f"{nodeid}: {summary}")
        if self.output_dir is None:
            print("\n".join(lines), flush=True)
            return
        directory = self.output_dir / "tests" / sanitise_nodeid(nodeid)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / RESULT_FILE).write_text(json.dumps(result, indent=2))
        (directory / LOG_FILE).write_text("\n".join(lines) + "\n")

    def _progress(self, nodeid: str, total: int) -> None:
        """The check run's live line: the tests are done, a bisection is running."""
        if self.output_dir is not None:
            path = self.output_dir / "progress.json"
            path.with_suffix(".tmp").write_text(json.dumps(
                {"done": total, "total": total, "current": f"bisecting {nodeid}" if nodeid else ""}))
            path.with_suffix(".tmp").replace(path)

    @staticmethod
    def _say(text: str) -> None:
        print(f"compile-ci bisect: {text}", file=sys.stderr, flush=True)


def _declared_pass(item: pytest.Item, finding: Finding) -> tuple[str, str] | None:
    """(the custom-pass hook, where the repository's pass is) when torch's bisector names a custom-pass hook of
    inductor's config: torch leaves those empty, so what runs there is what the test installed (a suite installs the
    repository's declared pass inside the test, where no compiler change of the repository's, the suspect pair, is
    seen). Where: `_pass_where`."""
    from suites.harness import CUSTOM_PASS_HOOKS

    hooks = [name for name in finding.names if name in CUSTOM_PASS_HOOKS]
    if finding.status != "found" or not hooks:
        return None
    target = dict(item.user_properties).get("compile_ci_target")  # what the test exercises (suites/plugin.py)
    return f"torch._inductor.config.{hooks[0]}", _pass_where(hooks[0], target if isinstance(target, str) else "")


def _pass_where(hook: str, target: str) -> str:
    """Where the pass on `hook` is: the repository's declared pass of that hook's kind ([targets] pre_grad_passes,
    post_grad_passes, joint_passes). The test's own target when it is one of them (the passes suite's tests exercise
    a pass); the one declared when there is one (a model's test that installs the repository's pass exercises the
    model: naming the model's class would send the maintainer to the wrong file); else the test's target."""
    from suites import targets
    from suites.code_origin import where
    from suites.harness import DECLARED_PASS_HOOKS

    checkout = os.environ.get("COMPILE_CI_CHECKOUT", "")
    declared = [where(entry.fn, checkout) for kind, on in DECLARED_PASS_HOOKS.items() if on == hook
                for entry in targets.declared_callables(kind) if not isinstance(entry, targets.TargetError)]
    declared = [place for place in declared if place]
    return target if target in declared or len(declared) != 1 else declared[0]


def one_line(result: dict[str, Any]) -> str:
    """The answer in one line, as the job log says it (the service renders its own from bisect.json)."""
    parts = [f"{result.get('status')}: {result.get('reason')}"]
    if result.get("status") == "found":
        number = result.get("number")
        parts = [f"wrong from {result.get('backend')}"]
        if result.get("subsystem"):
            parts.append(f"{result['subsystem']}" + (f" #{number}" if number is not None else ""))
        if result.get("names"):
            parts.append(" / ".join(result["names"]))
    suspect = result.get("suspect") or {}
    if result.get("place"):
        where = f" ({result['where']})" if result.get("where") else ""
        parts.append(f"red only with your change to {result['place']}{where}")
    elif suspect.get("verdict") == "yours":
        parts.append(f"red only with your changes ({suspect.get('count')})")
    elif suspect.get("verdict") == "upstream":
        parts.append("red on stock torch too")
    elif suspect.get("verdict") == "inseparable" and suspect.get("changes"):
        parts.append(f"stock torch not tried: your change to {suspect['changes'][0].get('place')} cannot be taken "
                     "out in-process")
    return " · ".join(parts)


def take_baseline() -> None:
    """torch's compiler as torch defines it, which the suspect pair puts back: taken before the repository's code
    runs (suites/plugin.py's import in a job, repro.py's start with --bisect)."""
    compiler_surface.install()


def register(config: pytest.Config, output_dir: Path | None) -> None:
    """From suites/plugin.py in a job, or from this module loaded with -p: only when there are seconds to spend."""
    seconds = budget_from(os.environ)
    if seconds > 0 and not config.pluginmanager.has_plugin(PLUGIN_NAME):
        bisect_probe.install()
        config.pluginmanager.register(BisectSession(output_dir, seconds), PLUGIN_NAME)


def pytest_configure(config: pytest.Config) -> None:
    output = os.environ.get("COMPILE_CI_OUTPUT_DIR")
    register(config, Path(output) if output else None)
