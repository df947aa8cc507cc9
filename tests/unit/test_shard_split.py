"""Splitting a suite into shards and merging them back: the split is fair and the same in every shard, and the merged
outcome says what one runner would have said for the same tests."""

from __future__ import annotations

import random

import pytest

from runners.protocol import RunResult
from service.jobs.lifecycle import INFRA_TITLE, Conclusion
from service.jobs.outcome import Attempt, judge
from service.jobs.shard_merge import disagreement_of, kind_of, merged_outcome
from service.jobs.shard_plan import shard_count
from service.planning.selection import MAX_PLAN_ENV, SelectionFile, fitted_durations, shard_env
from service.store import Shard, TestRecord
from suites.shard_plan import SHARD_ENV, decode_plan, split


def test_longest_first_onto_the_least_loaded_shard() -> None:
    durations = {"a": 10.0, "b": 6.0, "c": 5.0, "d": 4.0, "e": 1.0}
    shards = split(list(durations), durations, 2)
    loads = [sum(durations[n] for n, s in zip(durations, shards, strict=True) if s == k) for k in (0, 1)]
    assert shards == [0, 1, 1, 0, 1] and loads == [14.0, 12.0]  # 14 is the best any split of these can do


def test_without_history_the_split_is_by_count() -> None:
    nodeids = [f"test_{i}" for i in range(10)]
    shards = split(nodeids, {}, 3)
    assert sorted(shards.count(k) for k in range(3)) == [3, 3, 4]


def test_every_shard_computes_the_same_split_whatever_order_it_collected_in() -> None:
    nodeids = [f"m{i % 7}.py::test_{i}" for i in range(200)]
    durations = {n: float(i % 13) for i, n in enumerate(nodeids) if i % 3}  # a third never ran before
    first = dict(zip(nodeids, split(nodeids, durations, 4), strict=True))
    shuffled = random.Random(7).sample(nodeids, len(nodeids))
    assert dict(zip(shuffled, split(shuffled, durations, 4), strict=True)) == first


def test_a_test_without_a_recorded_duration_weighs_the_median_one() -> None:
    durations = {"slow": 9.0, "mid": 2.0, "quick": 1.0}
    assert split(["slow", "mid", "quick", "new"], durations, 2) == [0, 1, 1, 1]  # new weighs 2 s: 9 against 5


@pytest.mark.parametrize(("max_shards", "slots", "durations", "min_seconds", "expected"), [
    (4, 1, {}, 30, 1),  # one worker slot: one shard, as before
    (4, 8, {}, 30, 4),  # no history: the cap
    (4, 2, {}, 30, 2),  # two slots
    (4, 8, {"a": 100.0, "b": 100.0, "c": 1.0}, 30, 3),  # no more shards than tests
    (8, 8, {f"t{i}": 10.0 for i in range(10)}, 30, 4),  # 100 s of tests, a shard per 30 s
    (8, 8, {f"t{i}": 10.0 for i in range(10)}, 0, 8),
    (4, 8, {"a": 1.0}, 30, 1),
])
def test_how_many_shards(max_shards: int, slots: int, durations: dict[str, float], min_seconds: int,
                         expected: int) -> None:
    assert shard_count(max_shards, slots, durations, min_seconds) == expected


def _records(outcomes: list[str]) -> list[TestRecord]:
    return [TestRecord(nodeid=f"t.py::test_{i}", outcome=o, duration_s=0.1) for i, o in enumerate(outcomes)]


def _shard(index: int, result: RunResult, records: list[TestRecord]) -> Shard:
    outcome = judge(result, Attempt(records=records))
    return Shard(index=index, count=3, kind=kind_of(outcome), conclusion=outcome.conclusion.value,
                 title=outcome.title, detail=outcome.detail, torch_version="2.13.0")


@pytest.mark.parametrize("outcomes", [
    ["passed"] * 7,
    ["passed", "failed", "skipped", "passed", "error", "xfailed", "passed"],
    ["skipped", "skipped"],
    ["passed"],  # fewer tests than shards: two shards run none
])
def test_merged_shards_say_what_one_runner_says(outcomes: list[str]) -> None:
    records = _records(outcomes)
    failing = any(o in ("failed", "error") for o in outcomes)
    whole = judge(RunResult(1 if failing else 0, 1.0), Attempt(records=records))
    parts = [records[k::3] for k in range(3)]
    shards = [_shard(k, RunResult(1 if any(r.outcome in ("failed", "error") for r in part) else 0, 1.0), part)
              for k, part in enumerate(parts)]
    merged = merged_outcome(shards, Attempt(records=records).counts)
    assert (merged.conclusion, merged.title, merged.detail, merged.counts) == (
        whole.conclusion, whole.title, whole.detail, whole.counts)


def test_no_tests_collected_anywhere_is_no_tests_ran() -> None:
    shards = [_shard(k, RunResult(5, 1.0), []) for k in range(3)]
    whole = judge(RunResult(5, 1.0), Attempt())
    merged = merged_outcome(shards, Attempt().counts)
    assert (merged.conclusion, merged.title) == (whole.conclusion, whole.title) == (Conclusion.NEUTRAL, "No tests ran")


def test_a_shard_that_did_not_run_to_the_end_speaks_for_the_job() -> None:
    records = _records(["passed"] * 6)
    shards = [_shard(0, RunResult(0, 1.0), records[:2]), _shard(1, RunResult(None, 9.0, timed_out=True), records[2:4]),
              _shard(2, RunResult(0, 1.0), records[4:])]
    merged = merged_outcome(shards, Attempt(records=records).counts)
    assert (merged.conclusion, merged.title) == (Conclusion.TIMED_OUT, "Timed out")
    assert merged.detail.startswith("Shard 2 of 3: Killed at the job's time limit")
    shards[2] = _shard(2, RunResult(None, 0.0, infra_error="engine unreachable"), [])
    assert merged_outcome(shards, Attempt(records=records).counts).title == INFRA_TITLE  # the service's fault first


def test_shards_that_collected_different_tests_are_told_apart() -> None:
    same = [SelectionFile(["a", "b", "c"], [], k, 3, True) for k in range(2)]
    assert disagreement_of(same) == ""
    assert disagreement_of([*same, SelectionFile(["a", "b"], [], 2, 3, True)]).startswith("Shards 1 and 3 collected")
    assert disagreement_of([*same, SelectionFile()]) == ""  # a shard that never collected says nothing here


def test_the_plan_fits_an_environment_variable_keeping_the_longest_durations() -> None:
    durations = {f"suites/correctness/test_breadth_models.py::test_model[{'x' * 60}{i}]": float(i % 97)
                 for i in range(50_000)}
    kept = fitted_durations(durations)
    assert 0 < len(kept) < len(durations) and min(kept.values()) >= 50.0
    encoded = shard_env(3, 8, kept)[SHARD_ENV]
    assert len(encoded) <= MAX_PLAN_ENV
    assert decode_plan(encoded) == {"index": 3, "count": 8, "durations": kept}


def test_one_models_tests_share_a_shard_and_the_shards_stay_fair() -> None:
    nodeids = [f"test_{kind}[{model}]" for model in ("gpt2", "resnet", "vit") for kind in ("a", "b", "c")] + \
        [f"test_plain_{i}" for i in range(3)]
    groups = [f"zoo:examples#{n.split('[')[1][:-1]}" if "[" in n else "" for n in nodeids]
    durations = dict.fromkeys(nodeids, 2.0)  # 24 s in all: 8 s a shard
    shards = split(nodeids, durations, 3, groups)
    by_model = {g: {s for s, h in zip(shards, groups, strict=True) if h == g} for g in set(groups) - {""}}
    assert all(len(found) == 1 for found in by_model.values()), by_model
    assert sorted(shards.count(k) for k in range(3)) == [4, 4, 4]


def test_a_model_heavier_than_a_shards_share_is_cut_as_little_as_it_needs() -> None:
    nodeids = [f"test_big_{i}" for i in range(6)] + ["test_small_0", "test_small_1"]
    groups = ["big"] * 6 + ["small"] * 2
    durations = {**{f"test_big_{i}": 10.0 for i in range(6)}, "test_small_0": 5.0, "test_small_1": 5.0}
    shards = split(nodeids, durations, 3, groups)  # 70 s: 23.3 s a shard; the big model's 60 s in 3 pieces
    loads = [sum(durations[n] for n, s in zip(nodeids, shards, strict=True) if s == k) for k in range(3)]
    assert len({shards[6], shards[7]}) == 1 and max(loads) <= 30.0, (shards, loads)


def test_grouped_the_split_is_still_the_same_whatever_order_a_shard_collected_in() -> None:
    seed = random.randrange(2**32)
    print(f"seed {seed}")
    rng = random.Random(seed)
    nodeids = [f"m{i % 5}.py::test_{i}" for i in range(120)]
    groups = [rng.choice(["", "a", "b", "c", "d"]) for _ in nodeids]
    durations = {n: rng.uniform(0, 20) for n in nodeids if rng.random() < 0.7}
    first = dict(zip(nodeids, split(nodeids, durations, 4, groups), strict=True))
    order = rng.sample(range(len(nodeids)), len(nodeids))
    again = split([nodeids[i] for i in order], durations, 4, [groups[i] for i in order])
    assert dict(zip([nodeids[i] for i in order], again, strict=True)) == first
