"""Which tests a job or shard is told to run (suites/sharding.py reads it from the environment), and what its
`selection.json` says it did: a file the job wrote, so read bounded and checked like every other."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runners.grants import GrantChannel
from runners.untrusted_files import read_json_data
from service.planning.reuse_whole import Whole
from suites.shard_plan import NOT_AFFECTED_ENV, SELECTION_FILE, SHARD_ENV, encode_plan

MAX_SELECTION_BYTES = 16 * 1024 * 1024
MAX_TESTS = 200_000  # junit's own cap (service/jobs/junit.py)
MAX_NODEID = 2000
MAX_PLAN_ENV = 96 * 1024  # one environment variable holds at most 128 KiB on Linux


@dataclass(frozen=True)
class Selected:
    """The job's environment for it, and the line its log starts with (why some tests are not run)."""

    env: dict[str, str] = field(default_factory=dict)
    note: str = ""
    whole: Whole | None = None  # every test taken from this source job: no runner starts (reuse_whole.py)
    grants: GrantChannel | None = None  # a shard that takes its tests while it runs (service/jobs/grants.py)

    @property
    def asked_not_affected(self) -> bool:
        return NOT_AFFECTED_ENV in self.env


def not_affected_env(specs: Sequence[str]) -> dict[str, str]:
    return {NOT_AFFECTED_ENV: json.dumps(list(specs))} if specs else {}


def fitted_durations(durations: Mapping[str, float]) -> dict[str, float]:
    """The durations a shard plan carries: the shortest are left out (they then weigh the median recorded one) until
    the plan fits in an environment variable. Fixed once per attempt, so every shard splits alike."""
    kept = sorted(((n, round(max(0.0, s), 3)) for n, s in durations.items() if 0 < len(n) <= MAX_NODEID),
                  key=lambda item: (-item[1], item[0]))
    while kept and len(encode_plan({"index": 9999, "count": 9999, "durations": dict(kept)})) > MAX_PLAN_ENV:
        kept = kept[:len(kept) * 3 // 4]
    return dict(kept)


def shard_env(index: int, count: int, durations: Mapping[str, float], dynamic: bool = False) -> dict[str, str]:
    """`dynamic`: the shard takes its tests while it runs (suites/claiming.py) instead of a share fixed now."""
    plan = {"index": index, "count": count, "durations": dict(durations), **({"dynamic": True} if dynamic else {})}
    return {SHARD_ENV: encode_plan(plan)}


@dataclass(frozen=True)
class SelectionFile:
    order: list[str] = field(default_factory=list)  # what one runner would have run, in pytest's order
    not_affected: list[str] = field(default_factory=list)  # left to their base results
    index: int = 0
    count: int = 1
    found: bool = False
    taken: list[str] | None = None  # a dynamic shard's tests, in the order it ran them (None: not said)


def _nodeids(value: Any) -> list[str] | None:
    if not isinstance(value, list) or len(value) > MAX_TESTS:
        return None
    if not all(isinstance(n, str) and 0 < len(n) <= MAX_NODEID for n in value):
        return None
    return value


def read_selection(out: Path) -> SelectionFile:
    """The job's selection.json; an empty one when it is missing or not what the suites write."""
    try:
        data = read_json_data(out, SELECTION_FILE, MAX_SELECTION_BYTES)
    except (OSError, ValueError, RecursionError):
        return SelectionFile()
    if not isinstance(data, dict):
        return SelectionFile()
    order, left = _nodeids(data.get("order")), _nodeids(data.get("not_affected"))
    index, count = data.get("index"), data.get("count")
    if order is None or left is None or not isinstance(index, int) or not isinstance(count, int):
        return SelectionFile()
    taken = _nodeids(data["taken"]) if "taken" in data else None
    return SelectionFile(order, left, index, count, True, taken)
