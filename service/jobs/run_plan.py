"""A push's shard counts, chosen for the whole run: the counts with which its jobs, queued as they are, end soonest.

A push runs every job of its run whole, so its work is known from the records before any job starts: each test's
recorded seconds, per suite. Cutting each job by its own time alone (one shard per COMPILE_CI_SHARD_MIN_SECONDS, up
to one per slot) made 14 pieces of the real-model sample's six suites on four slots: every piece pays a start (a
pytest, torch's import, the collection, the first compile: 6-9 s on the GPU host), and four equal pieces of the
longest suite left the other pieces to pack behind them. Here the counts are chosen together, by simulating the
queue the worker slots will see (service/jobs/sharding.py):

- the run's job messages in their order (the store's, which the planner enqueues in); a slot takes the next one;
  a job of one shard runs whole on it, one of more fans out: the slot runs its first shard, and the others join the
  queue ahead of every job message still waiting (behind the shards queued before them);
- each piece takes a start (COMPILE_CI_SHARD_START_SECONDS) and the recorded time of its share of the tests, as the
  job's plugin will split them (suites/shard_plan.py: longest first, without the model groups only it can see).

From the per-job rule's counts and from one shard each, a deterministic descent moves one job's count by one while
that makes the run end sooner (ties: fewer pieces, then the lower counts in job order). The per-job bounds stay: no
more shards than slots, COMPILE_CI_MAX_SHARDS or tests, nor than one per COMPILE_CI_SHARD_MIN_SECONDS of the job's
recorded time. The plan is a function of the records and the slots, so every job of the run, planning on its own
worker, reaches the same counts.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from suites.shard_plan import split

FAN_OUT_S = 1.0  # a job message that fans out: the plan, the shards' rows and their messages


@dataclass(frozen=True)
class Work:
    """One job of the run: its name (for ties and logs) and the recorded seconds of each test it runs."""

    name: str
    durations: Mapping[str, float]


def shard_count(max_shards: int, slots: int, durations: Mapping[str, float], min_seconds: float) -> int:
    """The per-job rule: one shard per live slot up to the cap; with history, no more shards than tests, nor than one
    per `min_seconds` of recorded test time (a shard's start costs a pytest, a torch import and a collection)."""
    count = min(max_shards, slots)
    if durations:
        count = min(count, len(durations))
        if min_seconds > 0:
            count = min(count, max(1, math.ceil(sum(durations.values()) / min_seconds)))
    return max(1, count)


def piece_loads(durations: Mapping[str, float], count: int) -> list[float]:
    """The recorded seconds of each of `count` shards of a job, split as its plugin splits (empty pieces dropped)."""
    nodeids = sorted(durations)
    if count <= 1:
        return [sum(durations.values())]
    loads = [0.0] * count
    for nodeid, shard in zip(nodeids, split(nodeids, durations, count), strict=True):
        loads[shard] += durations[nodeid]
    return [load for load in loads if load > 0] or [0.0]


def makespan(jobs: Sequence[Sequence[float]], slots: int, start_s: float) -> float:
    """When the last piece ends: `jobs[i]` are job i's piece loads, in queue order (see the module's docstring)."""
    free = [0.0] * max(1, slots)
    queue, waiting = deque(jobs), deque[tuple[float, float]]()  # job messages; pieces queued (ready, load)
    end = 0.0
    while queue or waiting:
        at = heapq.heappop(free)
        if waiting and (waiting[0][0] <= at or not queue):  # a started job's piece goes ahead of job messages
            ready, load = waiting.popleft()
            done = max(at, ready) + start_s + load
        else:
            pieces = queue.popleft()
            fanned = at + (FAN_OUT_S if len(pieces) > 1 else 0.0)
            waiting.extend((fanned, load) for load in pieces[1:])
            done = fanned + start_s + pieces[0]  # a job of one piece runs whole; of more, its first piece here
        end = max(end, done)
        heapq.heappush(free, done)
    return end


def choose(work: Sequence[Work], slots: int, max_shards: int, min_seconds: float, start_s: float,
           first: Sequence[int] | None = None) -> list[int]:
    """Each job's shard count (see the module's docstring); `first`: the per-job rule's counts, where to start."""
    bounds = [shard_count(max_shards, slots, w.durations, min_seconds) for w in work]
    loads: dict[tuple[int, int], list[float]] = {}

    def pieces(index: int, count: int) -> list[float]:
        if (index, count) not in loads:
            loads[index, count] = piece_loads(work[index].durations, count)
        return loads[index, count]

    def cost(counts: Sequence[int]) -> tuple[float, int, tuple[int, ...]]:
        span = makespan([pieces(i, c) for i, c in enumerate(counts)], slots, start_s)
        return (round(span, 6), sum(counts), tuple(counts))

    best: tuple[float, int, tuple[int, ...]] | None = None
    starts = [[1] * len(work)] + ([[min(max(1, c), b) for c, b in zip(first, bounds, strict=True)]] if first else [])
    for counts in starts:
        current = cost(counts)
        while True:
            moves: list[list[int]] = []
            for i in range(len(work)):
                for step in (-1, 1):
                    if 1 <= current[2][i] + step <= bounds[i]:
                        moved = list(current[2])
                        moved[i] += step
                        moves.append(moved)
            better = min((cost(m) for m in moves), default=current)
            if better >= current:
                break
            current = better
        best = current if best is None or current < best else best
    assert best is not None
    return list(best[2])
