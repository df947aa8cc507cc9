"""How a push's shard counts fare on recorded GPU runs: `bench/shards.py` records replayed through the run plan.

A four-slot push on the GPU host costs about 3 minutes of device time and its one-slot pair 7, so a cut is measured
once and compared by replay. For each phase of a `shards.json` that has a one-slot and a four-slot push (same
machine), this prints the measured walls and ratio, then for each way of choosing the counts:

- the per-job rule (one shard per 30 s of recorded time, up to a slot each: `service/jobs/shard_plan.py`);
- the run plan (`service/jobs/run_plan.py`) from the one-slot push's records, as the four-slot push was planned;
- the run plan from the four-slot push's own per-test times: a deployment whose records come from its own slots;
- the best counts of all (up to four a job), found by trying every one;

its counts and its replayed end; each later four-slot push of the record (`--workers 1,4,4`), planned from the
four-slot push before it, as measured; and a repository's first push, which has no per-test times, so each job's
plugin splits by count: one count for every job (1 to 4), and the counts the run plan would choose from a prior that
knew each suite's share of the run (SHARE_PRIOR: what another repository gave) and the run's true total. The
replay: each job cut as its plugin cuts (`suites/shard_plan.py` split by the one-slot records, or by count for a
first push; a test's model group approximated by its parameter id's first part), each piece taking 8 s to start and
its tests' times as the four-slot push measured them, the queue as `run_plan.makespan` simulates it. The replay of
the cut the push ran, against its measured wall, is printed as the model's bias; "corrected" subtracts it (not from
the first push's lines, which are plain replays). `first push, taken`: the same first push with its shards taking
their tests while they run (suites/claiming.py), at one shard a slot for each job and at two a slot over the run, in
the suites' order and with the heaviest suite queued first (service/jobs/queue_order.py, what a first push does).

Run from the repository root: `python -m bench.run_plan_replay [SHARDS_JSON ...]` (default: the run-plan records in
bench/records/).
"""

from __future__ import annotations

import heapq
import itertools
import json
import math
import re
import sys
from collections import deque
from pathlib import Path

from service.jobs.queue_order import SUITE_WEIGHT, UNKNOWN_WEIGHT
from service.jobs.run_plan import FAN_OUT_S, Work, choose, makespan
from service.jobs.shard_plan import PIECES_PER_SLOT, shard_count
from suites.shard_plan import split

ROOT = Path(__file__).resolve().parents[1]
START_S = 8.0
SLOTS = 4
# Each suite's cold seconds on another repository (tests/suites/declared_repo, H100: docs/suites.md): a prior a first
# push could have, the best case of which the replay tries.
SHARE_PRIOR = {"autograd": 76.1, "correctness": 102.2, "freezing": 44.9, "fusion": 17.6, "layout": 21.0, "passes": 29.0}


def group(nodeid: str) -> str:
    match = re.search(r"\[(.*)\]$", nodeid)
    return match.group(1).split("-")[0] if match else ""


def times(run: dict) -> dict[str, dict[str, float]]:
    return {job["suite"]: {nodeid: float(seconds) for nodeid, _shard, seconds in job["each_test"]}
            for job in run["jobs"]}


def replay(names: list[str], records: dict[str, dict[str, float]], four: dict[str, dict[str, float]],
           counts: tuple[int, ...]) -> float:
    jobs = []
    for name, count in zip(names, counts, strict=True):
        nodeids = sorted(records[name])
        keys = [group(n) for n in nodeids]
        shard_of = split(nodeids, records[name], count, keys) if count > 1 else [0] * len(nodeids)
        pieces: dict[int, float] = {}
        for nodeid, shard in zip(nodeids, shard_of, strict=True):
            pieces[shard] = pieces.get(shard, 0.0) + four[name].get(nodeid, records[name][nodeid])
        jobs.append(list(pieces.values()))
    return makespan(jobs, SLOTS, START_S)


def by_count(names: list[str], four: dict[str, dict[str, float]], counts: tuple[int, ...]) -> float:
    """The replayed end of a first push: each job cut by count (its plugin has no durations to split by)."""
    jobs = []
    for name, count in zip(names, counts, strict=True):
        nodeids = sorted(four[name])
        shard_of = split(nodeids, {}, count, [group(n) for n in nodeids]) if count > 1 else [0] * len(nodeids)
        pieces: dict[int, float] = {}
        for nodeid, shard in zip(nodeids, shard_of, strict=True):
            pieces[shard] = pieces.get(shard, 0.0) + four[name][nodeid]
        jobs.append(list(pieces.values()))
    return makespan(jobs, SLOTS, START_S)


def first_push(names: list[str], records: dict[str, dict[str, float]], four: dict[str, dict[str, float]],
               one_wall: float) -> None:
    uniform = [f"{c} each {by_count(names, four, (c,) * len(names)) / one_wall:.3f} x" for c in range(1, SLOTS + 1)]
    print(f"  {'first push, one count':28} {', '.join(uniform)}")
    total = sum(sum(t.values()) for t in records.values())
    prior = {n: {t: SHARE_PRIOR[n] / sum(SHARE_PRIOR.values()) * total / len(records[n]) for t in records[n]}
             for n in names}
    counts = tuple(choose([Work(n, prior[n]) for n in names], SLOTS, SLOTS, 30, START_S,
                          [shard_count(SLOTS, SLOTS, prior[n], 30) for n in names]))
    print(f"  {'first push, share prior':28} {str(counts):20} {sum(counts):2} pieces  "
          f"{by_count(names, four, counts) / one_wall:.3f} x (the true total given)")


def units(times_of: dict[str, float], count: int, cut: int = 2) -> list[float]:
    """A first push's units as suites/sharding.py `units` makes them (its model groups approximated as `group` does),
    by count: each unit's seconds as the four-slot push measured its tests, in the order they are given."""
    nodeids = sorted(times_of)
    groups: dict[str, list[str]] = {}
    for nodeid in nodeids:
        groups.setdefault(group(nodeid) or "\0" + nodeid, []).append(nodeid)
    limit = len(nodeids) / (cut * count) if cut else float("inf")
    pieces: list[list[str]] = []
    for members in groups.values():
        piece: list[str] = []
        for nodeid in members:
            if piece and len(piece) + 1 > limit:
                pieces.append(piece)
                piece = []
            piece.append(nodeid)
        pieces.append(piece)
    ordered = sorted(pieces, key=lambda p: (-len(p), nodeids.index(p[0])))
    return [sum(times_of[n] for n in piece) for piece in ordered]


def taken(names: list[str], four: dict[str, dict[str, float]], counts: tuple[int, ...], cut: int = 2) -> float:
    """The replayed end of a first push whose shards take their tests while they run (suites/claiming.py): the queue
    as run_plan.makespan has it (a slot that takes a job message of more than one shard fans it out and runs its first
    shard; the others are queued when the fan-out ends, ahead of the job messages still waiting), each shard taking
    START_S and then its job's next unit whenever it finishes one, in time order across every running shard; a shard
    that starts after its job's units were all given ends at once (the worker completes it without a runner)."""
    pools = [deque(units(four[n], c, cut)) if c > 1 else deque() for n, c in zip(names, counts, strict=True)]
    jobs: deque[int] = deque(range(len(names)))
    waiting: deque[tuple[float, int]] = deque()  # shards queued: (ready, job)
    events: list[tuple[float, int, str, int]] = [(0.0, k, "free", -1) for k in range(SLOTS)]
    order, end = itertools.count(SLOTS), 0.0
    while events:
        at, _n, kind, job = heapq.heappop(events)
        if kind == "take":
            if pools[job]:
                heapq.heappush(events, (at + pools[job].popleft(), next(order), "take", job))
                continue
            end = max(end, at)
            kind = "free"
        if kind != "free" or not (jobs or waiting):
            continue
        if waiting and (waiting[0][0] <= at or not jobs):
            ready, i = waiting.popleft()
            heapq.heappush(events, (max(at, ready) + START_S, next(order), "take", i))
            continue
        i = jobs.popleft()
        if counts[i] <= 1:
            done = at + START_S + sum(four[names[i]].values())
            end = max(end, done)
            heapq.heappush(events, (done, next(order), "free", -1))
        else:
            waiting.extend((at + FAN_OUT_S, i) for _ in range(counts[i] - 1))
            heapq.heappush(events, (at + FAN_OUT_S + START_S, next(order), "take", i))
    return end


def first_push_taken(names: list[str], four: dict[str, dict[str, float]], one_wall: float) -> None:
    """A first push whose shards take their tests while they run: one shard a slot for every job (what ran first) and
    two shards a slot over the run's jobs (service/jobs/shard_plan.py PIECES_PER_SLOT, the default)."""
    ends = []
    two = max(1, math.ceil(PIECES_PER_SLOT * SLOTS / len(names)))
    for label, count in (("a shard a slot for each job", SLOTS), ("two a slot over the run", two)):
        ends.append(f"{label} ({count} each) {taken(names, four, (count,) * len(names)) / one_wall:.3f} x")
    heaviest = sorted(names, key=lambda n: -SUITE_WEIGHT.get(n, UNKNOWN_WEIGHT))  # service/jobs/queue_order.py
    end = taken(heaviest, four, (two,) * len(names))
    ends.append(f"two a slot, heaviest suite queued first (the default) {end / one_wall:.3f} x")
    print(f"  {'first push, taken':28} {', '.join(ends)}")


def pairs(report: dict) -> list[tuple[str, dict, dict]]:
    found = []
    for phase in ("cold", "warm"):
        one = [r for r in report["runs"] if r["kind"] == f"push, {phase}" and r["workers"] == 1]
        four = [r for r in report["runs"] if r["kind"] == f"push, {phase}" and r["workers"] == SLOTS]
        if one and four:
            found.append((phase, one[0], four[0]))
    return found


def main(paths: list[Path]) -> int:
    for path in paths:
        report = json.loads(path.read_text())
        for phase, one, four in pairs(report):
            names = [job["suite"] for job in one["jobs"]]
            records, measured = times(one), times(four)
            ran = tuple(len(job["shards"]) if job.get("shards") else 1 for job in four["jobs"])
            bias = replay(names, records, measured, ran) - four["wall_s"]
            print(f"{path.name}, {phase}: one slot {one['wall_s']:.1f} s, four slots {four['wall_s']:.1f} s "
                  f"({four['wall_s'] / one['wall_s']:.3f} x) as {ran}; the replay of that cut is {bias:+.1f} s off")
            print(f"  suites {', '.join(names)}")
            rule = tuple(shard_count(SLOTS, SLOTS, records[n], 30) for n in names)
            planned = tuple(choose([Work(n, records[n]) for n in names], SLOTS, SLOTS, 30, START_S, list(rule)))
            own = tuple(choose([Work(n, measured[n]) for n in names], SLOTS, SLOTS, 30, START_S,
                               [shard_count(SLOTS, SLOTS, measured[n], 30) for n in names]))
            best = min(itertools.product(range(1, SLOTS + 1), repeat=len(names)),
                       key=lambda c: (round(replay(names, records, measured, c), 6), sum(c), c))
            for label, counts in (("per-job rule", rule), ("run plan, one-slot records", planned),
                                  ("run plan, four-slot records", own), ("best of all counts", best)):
                end = replay(names, records, measured, counts)
                print(f"  {label:28} {str(counts):20} {sum(counts):2} pieces  replayed {end:6.1f} s  corrected "
                      f"{end - bias:6.1f} s  {(end - bias) / one['wall_s']:.3f} x")
            for again in (r for r in report["runs"] if r["kind"] == f"push, {phase}" and r["workers"] == SLOTS
                          and r is not four):  # a later four-slot push, planned from the one before it (measured)
                cut = tuple(len(job["shards"]) if job.get("shards") else 1 for job in again["jobs"])
                print(f"  {'measured: a later push':28} {str(cut):20} {sum(cut):2} pieces  planned from the four-slot "
                      f"records, {again['wall_s']:.1f} s  {again['wall_s'] / one['wall_s']:.3f} x")
            if all(n in SHARE_PRIOR for n in names):
                first_push(names, records, measured, one["wall_s"])
                first_push_taken(names, measured, one["wall_s"])
    return 0


if __name__ == "__main__":
    given = [Path(p) for p in sys.argv[1:]]
    raise SystemExit(main(given or sorted((ROOT / "bench" / "records").glob("h200-models-repo-run-plan-*.json"))))
