"""The breadth corpus (issue 20) catches compiler bugs in families the suites never compiled before: scans, bit
operations, accumulation over duplicate indices, random streams. Each plant fails exactly the test of the
architecture that uses the family; a neighbour that does not (or uses it only without duplicates) still passes."""

from __future__ import annotations

from pathlib import Path

import pytest

from .suite_run import run_suite

ARCHITECTURE = "test_architecture_matches_eager_forward_and_backward"
SCANS, MOE = f"{ARCHITECTURE}[scans_and_bits]", f"{ARCHITECTURE}[mixture_of_experts]"
GNN, TRANSFORMER = f"{ARCHITECTURE}[graph_convolution]", f"{ARCHITECTURE}[transformer_kv_cache]"
RANDOM = {"test_random_ops_have_their_distributions", "test_two_random_ops_in_one_graph_are_independent",
          "test_seed_reproduces_compiled_draws"}

# plant -> (-k selection, exactly the tests it must fail, the tests that must still pass)
PLANTS = {
    "exclusive_cumsum": ("scans_and_bits or mixture_of_experts", {SCANS}, {MOE}),
    "xor_as_or": ("scans_and_bits or mixture_of_experts", {SCANS}, {MOE}),
    # The transformer's position-embedding backward accumulates too, but over unique indices: unaffected.
    "index_put_overwrites": ("graph_convolution or transformer_kv_cache", {GNN}, {TRANSFORMER}),
    "random_ops_share_seed": ("breadth_random", {"test_two_random_ops_in_one_graph_are_independent"},
                              RANDOM - {"test_two_random_ops_in_one_graph_are_independent"}),
}


def test_clean_compiler_passes_every_selection(tmp_path: Path) -> None:
    selection = " or ".join(f"({select})" for select, _, _ in PLANTS.values())
    run = run_suite("correctness", selection, tmp_path, timeout=900)
    assert run.returncode == 0, run.describe()
    assert run.named("passed") == {SCANS, MOE, GNN, TRANSFORMER} | RANDOM, run.outcomes


@pytest.mark.parametrize("plant", list(PLANTS))
def test_planted_bug_is_caught(plant: str, tmp_path: Path) -> None:
    selection, caught, unaffected = PLANTS[plant]
    run = run_suite("correctness", selection, tmp_path, plant=plant, timeout=900)
    assert run.returncode == 1, run.describe()
    assert run.named("failed") == caught, run.describe()
    assert run.named("passed") == unaffected, run.outcomes
