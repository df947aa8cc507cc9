"""The shard plan's contract between the service (which writes it) and the job's plugin (suites/sharding.py,
which reads it): names, the deterministic split and the plan's encoding. Imports only the standard library, since
the service's image has no pytest."""

from __future__ import annotations

import base64
import json
import math
import statistics
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

SHARD_ENV = "COMPILE_CI_SHARD"  # encode_plan(): {"index", "count", "durations": {nodeid: seconds}}
NOT_AFFECTED_ENV = "COMPILE_CI_NOT_AFFECTED"  # a JSON list of the groups whose results are reused, not run
# The group of a suite's tests that exercise no declared target (the built-in corpus, the op sweep): their results
# depend on the compiler surface only. Not a `module:callable` spec, so no declared target can be named so.
CORPUS_GROUP = "(built-in corpus)"
BUILTIN_SPEC = "builtin"  # the spec a suite's own models carry (the passes suite's zoo): compile-ci's code, the corpus
SELECTION_FILE = "selection.json"
NO_HISTORY_S = 1.0  # the weight of every test when none has a recorded duration: a split by count
# A shard plan with "dynamic": its shards take their tests while they run (suites/claiming.py): a shard asks for the
# next unit by printing CLAIM_MARKER, its request number and the job's unit count on a line of its own; the worker
# answers in the directory GRANTS_ENV names (read-only to the job), one file per request: the unit's index, or -1.
GRANTS_ENV = "COMPILE_CI_GRANTS"
CLAIM_MARKER = "compile-ci-claim"
NO_UNIT_LEFT = -1


def split(nodeids: Sequence[str], durations: Mapping[str, float], count: int,
          groups: Sequence[str] | None = None) -> list[int]:
    """The shard of each test: longest first onto the least loaded shard (ties: the lower index). A test without a
    recorded duration weighs the median recorded one, so without any history the split is by count.

    ``groups``: what each test compiles ("" for nothing known, e.g. its model): the tests of one group go to one
    shard together, so that shard compiles the group's graphs once and the others not at all. A group heavier than a
    shard's fair share (the total over ``count``) is cut into as many pieces as it needs to fit, each piece placed
    like a group."""
    known = [durations[n] for n in nodeids if n in durations]
    default = statistics.median(known) if known else NO_HISTORY_S
    weight = [max(0.0, float(durations.get(n, default))) for n in nodeids]
    count = max(1, count)
    fair = sum(weight) / count
    units: dict[str, list[int]] = {}
    for i, nodeid in enumerate(nodeids):
        key = groups[i] if groups is not None and groups[i] else "\0" + nodeid  # no group: the test alone
        units.setdefault(key, []).append(i)
    pieces: list[list[int]] = []
    for members in units.values():
        total = sum(weight[i] for i in members)
        cuts = max(1, min(len(members), math.ceil(total / fair - 1e-9))) if fair > 0 else 1
        pieces.extend(_longest_first(members, weight, cuts, key=lambda i: nodeids[i]))
    loads = [0.0] * count
    shard_of = [0] * len(nodeids)
    ordered = sorted(pieces, key=lambda piece: (-sum(weight[i] for i in piece), min(nodeids[i] for i in piece)))
    for piece in ordered:
        chosen = min(range(count), key=lambda k: (loads[k], k))
        for i in piece:
            shard_of[i] = chosen
        loads[chosen] += sum(weight[i] for i in piece)
    return shard_of


def _longest_first(members: list[int], weight: Sequence[float], bins: int,
                   key: Callable[[int], str]) -> list[list[int]]:
    """``members`` in ``bins`` pieces, each the heaviest first onto the lightest (deterministic: ties by ``key``)."""
    if bins == 1:
        return [members]
    loads = [0.0] * bins
    pieces: list[list[int]] = [[] for _ in range(bins)]
    for i in sorted(members, key=lambda i: (-weight[i], key(i))):
        chosen = min(range(bins), key=lambda k: (loads[k], k))
        pieces[chosen].append(i)
        loads[chosen] += weight[i]
    return [piece for piece in pieces if piece]


def encode_plan(plan: Mapping[str, Any]) -> str:
    """Compact enough for an environment variable (Linux caps one at 128 KiB): the service trims the durations."""
    return base64.b64encode(zlib.compress(json.dumps(plan, sort_keys=True).encode(), 9)).decode()


def decode_plan(text: str) -> dict[str, Any]:
    """The plan encode_plan wrote; ValueError for anything else."""
    try:
        plan = json.loads(zlib.decompress(base64.b64decode(text)))
    except (ValueError, zlib.error):
        raise ValueError(f"{SHARD_ENV} is not a shard plan compile-ci wrote") from None
    if not isinstance(plan, dict):
        raise ValueError(f"{SHARD_ENV} is not a shard plan compile-ci wrote")
    return plan
