"""The fusion suite catches a graph CSE that merges random ops."""

from __future__ import annotations

from pathlib import Path

from .suite_run import run_suite

SELECTION = "cse"
CAUGHT = {f"test_cse_never_merges_random_ops[{op}]" for op in ("rand_like", "randn", "rand", "randint")}


def test_clean_cse_passes(tmp_path: Path) -> None:
    run = run_suite("fusion", SELECTION, tmp_path)
    assert run.returncode == 0, run.output[-4000:]
    assert CAUGHT <= run.named("passed") and not run.named("failed")


def test_cse_merging_random_ops_is_caught(tmp_path: Path) -> None:
    run = run_suite("fusion", SELECTION, tmp_path, plant="cse_merges_random_ops")
    assert run.returncode == 1, run.output[-4000:]
    assert run.named("failed") == CAUGHT, run.outcomes
    # Deterministic duplicates are still merged correctly: only the random-op checks fail.
    assert "test_cse_merges_exactly_the_duplicates[kwargs]" in run.named("passed")
