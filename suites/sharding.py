"""Which collected tests this job runs: its shard's share, split by recorded durations, and not the tests whose results
the service reuses (groups: declared targets the change cannot reach, and the built-in corpus when the change cannot
reach the compiler); registered by suites/plugin.py when asked to.

Every shard collects the whole suite (collection is needed to run anyway, so no separate collect step) and keeps
its share of the same deterministic split, so N shards together run exactly what one runner would. A plan marked
"dynamic" (no recorded times to split by) fixes no share: the shard takes units of tests while it runs
(suites/claiming.py). It writes `selection.json`: the tests one runner would have run, in order (the service merges
the shards' results in that order and checks that every shard saw the same), the tests left to their base results,
its own count and, for a dynamic shard once it ends, the tests it took (the service checks that every test was
taken).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from .claiming import Claiming
from .device_context import CONTINUE_ONLY_ENV, RESUMES_TAKING
from .shard_plan import (
    BUILTIN_SPEC,
    CORPUS_GROUP,
    GRANTS_ENV,
    NO_HISTORY_S,
    NOT_AFFECTED_ENV,
    SELECTION_FILE,
    SHARD_ENV,
    decode_plan,
    split,
)


def target_specs(item: pytest.Item) -> set[str] | None:
    """The groups a test belongs to: the declared targets (`module:callable` specs) it exercises, or the corpus group
    for a test of none (a suite's own models, whose spec is BUILTIN_SPEC, are compile-ci's code: the corpus; any other
    spec no group key covers runs, as when unsure); None for a test of a declared target that failed to load (its
    failure is cheap and must show)."""
    callspec = getattr(item, "callspec", None)
    specs: set[str] = set()
    for value in (callspec.params.values() if callspec is not None else ()):
        for part in value if isinstance(value, tuple) else (value,):
            if type(part).__name__ == "TargetError":
                return None
            spec = getattr(part, "spec", None)
            if isinstance(spec, str) and spec != BUILTIN_SPEC:
                specs.add(spec)
    return specs or {CORPUS_GROUP}


# The parameters through which the built-in corpus names the model a test compiles (suites/correctness: `name`,
# suites/distributed: `corpus_model`).
CORPUS_MODEL_PARAMETERS = ("name", "corpus_model")


def model_key(item: pytest.Item) -> str:
    """What a test compiles, where the suites can tell: the declared models it exercises (each by its spec and name)
    or the built-in model a corpus test names; "" when nothing says. The split keeps the tests of one model in one
    shard (suites/shard_plan.py), so a model's graphs are compiled once per job, not once per shard."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return ""
    keys: set[str] = set()
    for parameter, value in callspec.params.items():
        for part in value if isinstance(value, tuple) else (value,):
            spec, name = getattr(part, "spec", None), getattr(part, "name", None)
            if isinstance(spec, str):
                keys.add(f"{spec}#{name}" if isinstance(name, str) else spec)
            elif parameter in CORPUS_MODEL_PARAMETERS and isinstance(part, str):
                keys.add(f"{item.path.parent.name}#{part}")
    return "|".join(sorted(keys))


def units(items: list[pytest.Item], durations: dict[str, float], count: int) -> list[list[pytest.Item]]:
    """What a dynamic shard takes at a time: the tests of one model together (compiled on one shard), a model
    heavier than half a shard's fair share cut into pieces (so that no late unit holds the job's end), each test of
    no model alone; the heaviest first, by recorded time or, without any, by count. The same for every shard."""
    known = [durations[item.nodeid] for item in items if item.nodeid in durations]
    default = sorted(known)[len(known) // 2] if known else NO_HISTORY_S
    weight = {id(item): max(0.0, float(durations.get(item.nodeid, default))) for item in items}
    groups: dict[str, list[pytest.Item]] = {}
    for item in items:
        groups.setdefault(model_key(item) or "\0" + item.nodeid, []).append(item)
    limit = sum(weight.values()) / (2 * max(1, count))
    pieces: list[list[pytest.Item]] = []
    for members in groups.values():
        piece: list[pytest.Item] = []
        load = 0.0
        for item in members:
            if piece and load + weight[id(item)] > limit:
                pieces.append(piece)
                piece, load = [], 0.0
            piece.append(item)
            load += weight[id(item)]
        pieces.append(piece)
    position = {id(item): index for index, item in enumerate(items)}
    return sorted(pieces, key=lambda p: (-sum(weight[id(i)] for i in p), position[id(p[0])]))


class Selection:
    def __init__(self, output_dir: Path, plan: dict[str, Any] | None, not_affected: frozenset[str],
                 grants: Path | None = None, resume: list[str] | None = None) -> None:
        self.output_dir, self.plan, self.not_affected = output_dir, plan, not_affected
        self.grants = grants  # a dynamic plan's: where the worker answers (None: a fixed share)
        self.resume = resume  # a dynamic shard's continuation: the tests its earlier process had taken and left
        self.emptied = False
        self.record: dict[str, Any] = {}
        self.claiming: Claiming | None = None
        self.earlier: dict[str, Any] = {}  # a continuation's: what its shard's earlier process wrote

    def _unaffected(self, item: pytest.Item) -> bool:
        specs = target_specs(item)
        return specs is not None and specs <= self.not_affected

    @pytest.hookimpl(trylast=True)  # after every other plugin and conftest chose and ordered the tests
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        left = [item for item in items if self.not_affected and self._unaffected(item)]
        kept = [item for item in items if not (self.not_affected and self._unaffected(item))]
        mine = kept
        index, count = 0, 1
        if self.plan is not None:
            index, count = int(self.plan.get("index", 0)), int(self.plan.get("count", 1))
            durations = self.plan.get("durations") or {}
            if self.grants is not None:  # taken while it runs: the session starts with none of them
                earlier = self.earlier = self._earlier() if self.resume is not None else {}
                wanted = {nodeid: i for i, nodeid in enumerate(self.resume or ())}
                first = sorted((i for i in kept if i.nodeid in wanted), key=lambda i: wanted[i.nodeid])
                asked = earlier.get("asked") if isinstance(earlier.get("asked"), int) else 0
                self.claiming = Claiming(config, self.grants, units(kept, durations, count), first, asked)
                config.pluginmanager.register(self.claiming, "compile-ci-claiming")
                mine = []
            else:
                shard_of = split([item.nodeid for item in kept], durations, count, [model_key(i) for i in kept])
                mine = [item for item, shard in zip(kept, shard_of, strict=True) if shard == index]
        chosen = set(map(id, mine))
        dropped = [item for item in left if id(item) not in chosen] if self.grants is not None else \
            [item for item in items if id(item) not in chosen]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        if len(mine) != len(items):
            self.emptied = not mine
            items[:] = mine
        self.output_dir.mkdir(parents=True, exist_ok=True)
        self.record = {"index": index, "count": count, "selected": len(mine),
                       "order": [item.nodeid for item in kept], "not_affected": [item.nodeid for item in left]}
        (self.output_dir / SELECTION_FILE).write_text(json.dumps(self.record))

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        # A shard whose share is empty, or a job whose every test is left to its base, ran nothing on purpose.
        if self.emptied and session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
            session.exitstatus = pytest.ExitCode.OK
        if self.claiming is not None and self.record:  # what it took: the service checks every test was taken
            before = self.earlier.get("taken", [])
            taken = list(dict.fromkeys([*(before if isinstance(before, list) else []),
                                        *(item.nodeid for item in session.items)]))
            (self.output_dir / SELECTION_FILE).write_text(json.dumps({
                **self.record, "selected": len(taken), "taken": taken, "asked": self.claiming.asked}))

    def _earlier(self) -> dict[str, Any]:
        """What this shard's earlier process wrote (a continuation's: what was taken, how many requests were made)."""
        try:
            data = json.loads((self.output_dir / SELECTION_FILE).read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}


def register(config: pytest.Config, output_dir: Path) -> None:
    """From suites/plugin.py: only when the service asked for a shard or named targets not affected."""
    raw_plan, raw_specs = os.environ.get(SHARD_ENV, ""), os.environ.get(NOT_AFFECTED_ENV, "")
    if not raw_plan and not raw_specs:
        return
    try:
        specs = json.loads(raw_specs) if raw_specs else []
    except ValueError:
        raise pytest.UsageError(f"{NOT_AFFECTED_ENV} is not a JSON list") from None
    try:
        plan = decode_plan(raw_plan) if raw_plan else None
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    chosen = frozenset(s for s in specs if isinstance(s, str)) if isinstance(specs, list) else frozenset()
    grants, resume = None, None
    if plan is not None and plan.get("dynamic"):
        if not os.environ.get(GRANTS_ENV):
            raise pytest.UsageError(f"a shard plan that takes its tests while it runs needs {GRANTS_ENV}")
        grants = Path(os.environ[GRANTS_ENV])
        if os.environ.get(CONTINUE_ONLY_ENV):  # its earlier process lost its device: its tests left, then more
            resume = [str(n) for n in json.loads(Path(os.environ[CONTINUE_ONLY_ENV]).read_text())]
            config.pluginmanager.register(object(), RESUMES_TAKING)
    config.pluginmanager.register(Selection(output_dir, plan, chosen, grants, resume), "compile-ci-selection")
