"""The shard plan's contract between the service (which writes it) and the job's plugin (suites/sharding.py,
which reads it): names, the deterministic split and the plan's encoding. Imports only the standard library, since
the service's image has no pytest."""

from __future__ import annotations

import base64
import json
import statistics
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

SHARD_ENV = "COMPILE_CI_SHARD"  # encode_plan(): {"index", "count", "durations": {nodeid: seconds}}
NOT_AFFECTED_ENV = "COMPILE_CI_NOT_AFFECTED"  # a JSON list of the groups whose results are reused, not run
# The group of a suite's tests that exercise no declared target (the built-in corpus, the op sweep): their results
# depend on the compiler surface only. Not a `module:callable` spec, so no declared target can be named so.
CORPUS_GROUP = "(built-in corpus)"
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
    """The plan encode_plan wrote; ValueError for anything else."""
    try:
        plan = json.loads(zlib.decompress(base64.b64decode(text)))
    except (ValueError, zlib.error):
        raise ValueError(f"{SHARD_ENV} is not a shard plan compile-ci wrote") from None
    if not isinstance(plan, dict):
        raise ValueError(f"{SHARD_ENV} is not a shard plan compile-ci wrote")
    return plan
