"""Compile-ledger deltas that mean something: graph breaks and recompiles first and always shown, compile times
compared like for like above a stated noise floor, code size only where the code changed, no division by zero."""

from __future__ import annotations

import math

import pytest

from service.compare.budgets import Budgets, violations
from service.compare.judgement import BaseInfo, BaseStatus, Judgement, judge
from service.compare.ledger import Ledger, ledger_of, times_comparable
from service.compare.ledger_deltas import Delta, ranked
from service.compare.summary import MAX_DELTAS, render_section
from service.store import TestResult

READY = BaseInfo(BaseStatus.READY, "b" * 40, "base", "base run")
COLD = {"fx_graph_cache_hits": 0, "fx_graph_cache_misses": 2}
WARM = {"fx_graph_cache_hits": 2, "fx_graph_cache_misses": 0}
BREAK = "Unsupported Tensor.item() call with capture_scalar_outputs=False (zoo/models.py:12)"


def _result(nodeid: str, **metrics: object) -> TestResult:
    return TestResult(nodeid=nodeid, outcome="passed", message="", metrics=metrics or None, file="t.py", line=1)


def _judged(pairs: dict[str, tuple[dict, dict]], changed: tuple[str, ...] = (), budgets: Budgets | None = None
            ) -> Judgement:
    base = [_result(nodeid, **b) for nodeid, (b, _) in pairs.items()]
    head = [_result(nodeid, **h) for nodeid, (_, h) in pairs.items()]
    return judge(head, base, READY, budgets or Budgets(), code_changed=lambda nodeid: nodeid in changed)


def _summary(judgement: Judgement) -> str:
    return render_section(judgement, lambda nodeid: f"http://ci.example.test/tests/{nodeid}")


@pytest.mark.parametrize(("ledger", "cache"), [
    ({"fx_graph_cache_hits": 0, "fx_graph_cache_misses": 3}, "cold"),
    ({"fx_graph_cache_hits": 3, "fx_graph_cache_misses": 0}, "warm"),
    ({"fx_graph_cache_hits": 1, "fx_graph_cache_misses": 2}, "mixed"),
    ({"fx_graph_cache_hits": 0, "fx_graph_cache_misses": 0}, "none"),  # an eager backend, or nothing compiled
    ({"fx_graph_cache_hits": 3}, None),  # not recorded: never compared
    ({"fx_graph_cache_hits": "3", "fx_graph_cache_misses": 0}, None),
])
def test_the_cache_state_of_a_test_comes_from_its_fx_graph_cache_counters(ledger: dict, cache: str | None) -> None:
    assert ledger_of(ledger).cache == cache


@pytest.mark.parametrize(("base", "head", "comparable"), [
    (COLD, COLD, True), (WARM, WARM, True), (COLD, WARM, False), (WARM, COLD, False),
    ({"fx_graph_cache_hits": 1, "fx_graph_cache_misses": 1}, {"fx_graph_cache_hits": 1, "fx_graph_cache_misses": 1},
     False),  # mixed: which graphs were cold is not known
    ({}, {}, False),
])
def test_compile_times_compare_like_for_like_only(base: dict, head: dict, comparable: bool) -> None:
    assert times_comparable(ledger_of(base), ledger_of(head)) is comparable


def test_a_base_of_zero_does_not_outrank_everything_and_no_weight_is_infinite() -> None:
    judgement = _judged({
        "t::kernels": ({"kernels_generated": 0}, {"kernels_generated": 4}),
        "t::bytes": ({"code_bytes": 0}, {"code_bytes": 51_200}),
        "t::slower": ({"compile_time_s": 2.0, **COLD}, {"compile_time_s": 7.0, **COLD}),
        "t::breaks": ({"graph_breaks": 0}, {"graph_breaks": 1}),
    }, changed=("t::kernels", "t::bytes"))
    assert [(d.nodeid, d.figure) for d in judgement.deltas] == [
        ("t::breaks", "graph_breaks"), ("t::bytes", "code_bytes"), ("t::kernels", "kernels_generated"),
        ("t::slower", "compile_time_s")]
    assert [d.weight for d in judgement.deltas[1:]] == [50.0, 4.0, 2.5]  # 0 -> 50 KiB is 50 units of 1 KiB
    assert all(math.isfinite(Delta("t", f, 0.0, 1.0).weight) for f in ("code_bytes", "compile_time_s", "recompiles"))


def test_graph_breaks_and_recompiles_come_first_and_are_all_shown_without_a_budget() -> None:
    big = {f"t::big{i:02}": ({"code_bytes": 1000}, {"code_bytes": 900_000 + i}) for i in range(30)}
    judgement = _judged({**big, "t::model": ({"graph_breaks": 0, "graph_break_reasons": []},
                                             {"graph_breaks": 1, "graph_break_reasons": [BREAK]}),
                         "t::guards": ({"recompiles": 2}, {"recompiles": 0})}, changed=tuple(big))
    summary = _summary(judgement)
    rows = [line for line in summary.splitlines() if line.startswith("| `")]
    assert rows[0] == "| `t::model` | graph breaks | 0 | 1 | +1 |"
    assert rows[1] == "| `t::guards` | recompiles | 2 | 0 | −2 |"
    assert len(rows) == 2 + MAX_DELTAS and "the 10 biggest of 30 other changes" in summary
    # No budget: dynamo's reason is still said, once, with a link to the test.
    assert "- [`t::model`](http://ci.example.test/tests/t::model) (graph breaks): Unsupported Tensor.item() call" \
        in summary


def test_a_budgeted_graph_break_gives_its_reason_in_the_violation_only() -> None:
    judgement = _judged({"t::model": ({"graph_breaks": 0}, {"graph_breaks": 1, "graph_break_reasons": [BREAK]})},
                        budgets=Budgets(new_graph_breaks=0))
    assert _summary(judgement).count("Unsupported Tensor.item() call") == 1


def test_compile_time_cold_against_warm_is_not_compared_and_the_note_says_so() -> None:
    judgement = _judged({
        "t::first": ({"compile_time_s": 19.4, **COLD}, {"compile_time_s": 1.45, **WARM}),
        "t::second": ({"compile_time_s": 0.2, **WARM}, {"compile_time_s": 4.0, **COLD}),
        "t::third": ({"compile_time_s": 0.76, **COLD}, {"compile_time_s": 0.14, **WARM}),
    })
    assert judgement.deltas == []
    summary = _summary(judgement)
    assert "a change under 0.5 s or ×1.5 is noise and not listed" in summary
    assert "Compile time not compared for 3 tests: 2 (base cold, head warm), 1 (base warm, head cold)." in summary


@pytest.mark.parametrize(("base_s", "head_s", "listed"), [
    (2.0, 4.0, True),  # ×2, +2 s
    (0.2, 0.6, False),  # ×3 but 0.4 s: below the floor in seconds
    (20.0, 25.0, False),  # +5 s but ×1.25: below the floor as a ratio
    (6.0, 2.0, True),  # faster counts too
])
def test_compile_time_changes_below_the_noise_floor_are_not_listed(base_s: float, head_s: float, listed: bool) -> None:
    judgement = _judged({"t::a": ({"compile_time_s": base_s, **COLD}, {"compile_time_s": head_s, **COLD})})
    assert bool(judgement.deltas) is listed
    if listed:
        assert "| `t::a` | compile time (s), both cold |" in _summary(judgement)


def test_dynamos_own_time_is_compared_whatever_the_cache() -> None:
    judgement = _judged({"t::a": ({"compile_time_s": 9.0, "dynamo_time_s": 0.3, **COLD},
                                  {"compile_time_s": 2.0, "dynamo_time_s": 1.5, **WARM})})
    assert [(d.figure, d.change) for d in judgement.deltas] == [("dynamo_time_s", "×5.00")]


def test_code_size_moves_only_count_where_the_generated_code_changed() -> None:
    # The same graphs compiled after more tests: "# AOT ID: ['10_inference']" is a byte longer than '9_...'.
    pairs = {"t::a": ({"code_bytes": 4357, "kernels_generated": 1}, {"code_bytes": 4358, "kernels_generated": 1})}
    assert _judged(pairs).deltas == []
    assert [d.figure for d in _judged(pairs, changed=("t::a",)).deltas] == ["code_bytes"]


def test_a_compile_time_budget_judges_like_for_like_only() -> None:
    budgets = Budgets(compile_time_ratio=1.25, compile_time_min_s=1.0)
    cold, warm = Ledger(compile_time_s=0.8, fx_graph_cache_hits=0, fx_graph_cache_misses=1), \
        Ledger(compile_time_s=0.8, fx_graph_cache_hits=1, fx_graph_cache_misses=0)
    slow_cold = Ledger(compile_time_s=3.0, fx_graph_cache_hits=0, fx_graph_cache_misses=1)
    assert violations("t::a", warm, slow_cold, budgets) == []  # a pull request that misses the cache is not slower
    (found,) = violations("t::a", cold, slow_cold, budgets)
    assert found.describe() == "compile_time_s 0.80 → 3 (budget: at most ×1.25 the base): ×3.75"


def test_ranking_is_stable_and_total() -> None:
    deltas = [Delta("t::b", "recompiles", 0, 1), Delta("t::a", "code_bytes", 0, 10**9),
              Delta("t::a", "graph_breaks", 3, 0), Delta("t::c", "kernels_generated", 2, 3)]
    assert [(d.nodeid, d.figure) for d in ranked(deltas)] == [  # what got worse first
        ("t::b", "recompiles"), ("t::a", "graph_breaks"), ("t::a", "code_bytes"), ("t::c", "kernels_generated")]
