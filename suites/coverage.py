"""Op-family coverage of a suite run (loaded with `-p suites.coverage`): which of inductor's lowering and
decomposition families the graphs it compiled went through, against the denominator of ``op_families``.

Active when `COMPILE_CI_OUTPUT_DIR` is set (or `COMPILE_CI_COVERAGE=1`, writing to the current directory); writes
`coverage.json` there at the end of the session. Recording observes inductor (each node it lowers, each
decomposition that fires); it changes nothing that is compiled. A graph served whole from the FX graph or AOT
autograd cache is not lowered again, so its families are not seen: the file counts those cache hits, and a cold
cache (what `bench/coverage.py` uses) gives the full figure.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch

from suites import harness, op_families
from suites.device_context import CONTINUE_ONLY_ENV

OUTPUT_ENV = "COMPILE_CI_OUTPUT_DIR"
ENABLE_ENV = "COMPILE_CI_COVERAGE"
FILE_NAME = "coverage.json"
FORMAT = 1


class CoverageRecorder:
    """Families seen per test (``lowered``: a node of a post-grad graph; ``decomposed``: a decomposition ran)."""

    def __init__(self) -> None:
        self.current = "<collection>"
        self.per_test: dict[str, dict[str, set[str]]] = {}
        self.cache_hits_start = self._cache_hits()
        self.hooked: dict[str, bool] = {}

    @staticmethod
    def _cache_hits() -> int:
        inductor = harness.dynamo_counters_or_empty().get("inductor", {})
        aot = harness.dynamo_counters_or_empty().get("aot_autograd", {})
        return int(inductor.get("fxgraph_cache_hit", 0)) + int(aot.get("autograd_cache_hit", 0))

    def take_earlier(self, path: Path) -> None:
        """The families an earlier process of this job recorded (suites/continuation.py), read as its own file."""
        try:
            earlier = json.loads(path.read_text())
            for test, hows in earlier.get("per_test", {}).items():
                for how, families in hows.items():
                    self.per_test.setdefault(str(test), {}).setdefault(str(how), set()).update(map(str, families))
            self.cache_hits_start -= int(earlier.get("cache_hits", 0))
        except (OSError, ValueError, AttributeError, TypeError):
            pass  # no file, or not one this plugin wrote: this process's families only

    def install(self) -> None:
        self.hooked = {"lowered": harness.record_lowered_ops(lambda target: self._seen("lowered", target)),
                       "decomposed": harness.record_decompositions(lambda op: self._seen("decomposed", op))}

    def _seen(self, how: str, target: Any) -> None:
        family = op_families.family_of(target)
        if family is not None:
            self.per_test.setdefault(self.current, {}).setdefault(how, set()).add(family)

    def report(self, device: str) -> dict[str, Any]:
        lowering_keys, decomposition_keys = harness.inductor_op_tables()
        universe = op_families.universe(lowering_keys, decomposition_keys)
        implicit = op_families.implicit_families(lowering_keys + decomposition_keys)
        counted, excluded = op_families.denominator(set(universe), device, implicit)
        seen = {family for hows in self.per_test.values() for families in hows.values() for family in families}
        covered = sorted(seen & counted)
        return {
            "format": FORMAT,
            "torch": torch.__version__,
            "device": device,
            "recording": self.hooked,
            "cache_hits": self._cache_hits() - self.cache_hits_start,
            "universe": len(universe),
            "denominator": len(counted),
            "covered": covered,
            "percent": round(100.0 * len(covered) / len(counted), 1) if counted else 0.0,
            "uncovered": sorted(counted - seen),
            "outside_denominator": sorted(seen - counted),
            "excluded": excluded,
            "per_test": {test: {how: sorted(families) for how, families in hows.items()}
                         for test, hows in sorted(self.per_test.items())},
        }


def _output_dir() -> Path | None:
    if os.environ.get(OUTPUT_ENV):
        return Path(os.environ[OUTPUT_ENV])
    return Path.cwd() if os.environ.get(ENABLE_ENV) == "1" else None


def pytest_configure(config: pytest.Config) -> None:
    if _output_dir() is None:
        return
    recorder = CoverageRecorder()
    recorder.install()
    if os.environ.get(CONTINUE_ONLY_ENV):  # the job's earlier process lost its device: its tests' families count too
        recorder.take_earlier(_output_dir() / FILE_NAME)  # type: ignore[operator]
    config.stash[_KEY] = recorder


_KEY = pytest.StashKey[CoverageRecorder]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    recorder = item.config.stash.get(_KEY, None)
    if recorder is not None:
        recorder.current = item.nodeid
    try:
        return (yield)
    finally:
        if recorder is not None:
            recorder.current = "<between tests>"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    recorder = session.config.stash.get(_KEY, None)
    directory = _output_dir()
    if recorder is None or directory is None:
        return
    device = os.environ.get("COMPILE_CI_DEVICE", "").strip().lower() or "cpu"
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / FILE_NAME
    temporary = target.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(recorder.report(device), indent=1))
    temporary.replace(target)
