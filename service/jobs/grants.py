"""A shard that takes its tests while it runs (suites/claiming.py): its channel to the worker, made per attempt.

A job attempt without recorded test times (a repository's first push, a new suite) has nothing to split by before
it runs; split by count, one shard of each job held the heavy models while the others idled (0.40 x one slot on
the GPU host's real-model sample, docs/operating.md). Its shards instead ask, each time they need more, for the
next unit of tests from one counter per job attempt in Redis (service/store/claims.py's grant_unit): so shards on
different hosts share it, and a retried shard attempt is given again what its earlier attempt was given.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from runners.grants import GrantChannel
from service.jobs.context import WorkerContext
from service.store import Shard


def grants_dir(ctx: WorkerContext, shard: Shard) -> Path:
    """The worker's answers to this shard attempt's requests: inside its work tree (removed after the attempt)."""
    return ctx.settings.data_dir / "work" / shard.id / "grants"


def channel(ctx: WorkerContext, shard: Shard) -> GrantChannel:
    directory = grants_dir(ctx, shard)
    shutil.rmtree(directory, ignore_errors=True)  # what a worker killed mid-attempt left: never an answer now
    directory.mkdir(parents=True)
    attempt = f"{shard.job_id}:{shard.job_attempt}"
    return GrantChannel(directory, lambda request, units: ctx.claims.grant_unit(attempt, shard.index, request,
                                                                                units))
