"""Which collected tests this job runs: its shard's share, split by recorded durations, and not the tests of declared
targets the pull request cannot affect (the service says which); registered by suites/plugin.py when asked to.

Every shard collects the whole suite (collection is needed to run anyway, so no separate collect step) and keeps
its share of the same deterministic split, so N shards together run exactly what one runner would. It writes
`selection.json`: the tests one runner would have run, in order (the service merges the shards' results in that
order and checks that every shard saw the same), the tests left to their base results, and its own count.
"""

from __future__ import annotations

import base64
import json
import os
import statistics
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

SHARD_ENV = "COMPILE_CI_SHARD"  # encode_plan(): {"index", "count", "durations": {nodeid: seconds}}
NOT_AFFECTED_ENV = "COMPILE_CI_NOT_AFFECTED"  # a JSON list of declared target specs the change cannot affect
SELECTION_FILE = "selection.json"
NO_HISTORY_S = 1.0  # the weight of every test when none has a recorded duration: a split by count


def split(nodeids: Sequence[str], durations: Mapping[str, float], count: int) -> list[int]:
    """The shard of each test: longest first onto the least loaded shard (ties: the lower index). A test without a
    recorded duration weighs the median recorded one, so without any history the split is by count."""
    known = [durations[n] for n in nodeids if n in durations]
    default = statistics.median(known) if known else NO_HISTORY_S
    weight = [max(0.0, float(durations.get(n, default))) for n in nodeids]
    loads = [0.0] * max(1, count)
    shard_of = [0] * len(nodeids)
    for i in sorted(range(len(nodeids)), key=lambda i: (-weight[i], nodeids[i])):
        chosen = min(range(len(loads)), key=lambda k: (loads[k], k))
        shard_of[i] = chosen
        loads[chosen] += weight[i]
    return shard_of


def encode_plan(plan: Mapping[str, Any]) -> str:
    """Compact enough for an environment variable (Linux caps one at 128 KiB): the service trims the durations."""
    return base64.b64encode(zlib.compress(json.dumps(plan, sort_keys=True).encode(), 9)).decode()


def decode_plan(text: str) -> dict[str, Any]:
    try:
        plan = json.loads(zlib.decompress(base64.b64decode(text)))
    except (ValueError, zlib.error):
        raise pytest.UsageError(f"{SHARD_ENV} is not a shard plan compile-ci wrote") from None
    if not isinstance(plan, dict):
        raise pytest.UsageError(f"{SHARD_ENV} is not a shard plan compile-ci wrote")
    return plan


def target_specs(item: pytest.Item) -> set[str] | None:
    """The declared targets (`module:callable` specs) a test exercises; None for a test of no declared target, or of
    one that failed to load (its failure is cheap and must show)."""
    callspec = getattr(item, "callspec", None)
    specs: set[str] = set()
    for value in (callspec.params.values() if callspec is not None else ()):
        for part in value if isinstance(value, tuple) else (value,):
            if type(part).__name__ == "TargetError":
                return None
            spec = getattr(part, "spec", None)
            if isinstance(spec, str):
                specs.add(spec)
    return specs or None


class Selection:
    def __init__(self, output_dir: Path, plan: dict[str, Any] | None, not_affected: frozenset[str]) -> None:
        self.output_dir, self.plan, self.not_affected = output_dir, plan, not_affected
        self.emptied = False

    def _unaffected(self, item: pytest.Item) -> bool:
        specs = target_specs(item)
        return bool(specs) and specs is not None and specs <= self.not_affected

    @pytest.hookimpl(trylast=True)  # after every other plugin and conftest chose and ordered the tests
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        left = [item for item in items if self.not_affected and self._unaffected(item)]
        kept = [item for item in items if not (self.not_affected and self._unaffected(item))]
        mine = kept
        index, count = 0, 1
        if self.plan is not None:
            index, count = int(self.plan.get("index", 0)), int(self.plan.get("count", 1))
            durations = self.plan.get("durations") or {}
            shard_of = split([item.nodeid for item in kept], durations, count)
            mine = [item for item, shard in zip(kept, shard_of, strict=True) if shard == index]
        chosen = set(map(id, mine))
        dropped = [item for item in items if id(item) not in chosen]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            self.emptied = not mine
            items[:] = mine
        self.output_dir.mkdir(parents=True, exist_ok=True)
        (self.output_dir / SELECTION_FILE).write_text(json.dumps({
            "index": index, "count": count, "selected": len(mine),
            "order": [item.nodeid for item in kept], "not_affected": [item.nodeid for item in left]}))

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        # A shard whose share is empty, or a job whose every test is left to its base, ran nothing on purpose.
        if self.emptied and session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
            session.exitstatus = pytest.ExitCode.OK


def register(config: pytest.Config, output_dir: Path) -> None:
    """From suites/plugin.py: only when the service asked for a shard or named targets not affected."""
    raw_plan, raw_specs = os.environ.get(SHARD_ENV, ""), os.environ.get(NOT_AFFECTED_ENV, "")
    if not raw_plan and not raw_specs:
        return
    try:
        specs = json.loads(raw_specs) if raw_specs else []
    except ValueError:
        raise pytest.UsageError(f"{NOT_AFFECTED_ENV} is not a JSON list") from None
    plan = decode_plan(raw_plan) if raw_plan else None
    chosen = frozenset(s for s in specs if isinstance(s, str)) if isinstance(specs, list) else frozenset()
    config.pluginmanager.register(Selection(output_dir, plan, chosen), "compile-ci-selection")
