"""The autograd suite catches AOT autograd dropping the copy-back of a mutated input."""

from __future__ import annotations

from pathlib import Path

from .suite_run import run_suite

SELECTION = "input_mutation"
BACKENDS = ("aot_eager", "inductor")
# Inference (copy_ kept in the graph) and training (copy_ in the runtime epilogue) both lose the mutation.
CAUGHT = {
    *(
        f"test_input_mutation_reaches_caller[{mode}-{backend}]"
        for mode in ("inference", "training")
        for backend in BACKENDS
    ),
    *(f"test_input_mutation_of_parameter_under_no_grad[{backend}]" for backend in BACKENDS),
    *(f"test_input_mutation_of_non_leaf_backpropagates[{backend}]" for backend in BACKENDS),
    *(f"test_input_mutation_through_expand[{backend}]" for backend in BACKENDS),
}
# Mutations that must raise never reach the copy-back, so they keep passing under the plant.
UNAFFECTED = {
    f"test_input_mutation_of_leaf_requiring_grad_raises[{op}-{backend}]"
    for op in ("add_", "set_")
    for backend in BACKENDS
}


def test_clean_aot_autograd_passes(tmp_path: Path) -> None:
    run = run_suite("autograd", SELECTION, tmp_path)
    assert run.returncode == 0, run.output[-4000:]
    assert run.named("passed") == CAUGHT | UNAFFECTED


def test_lost_input_mutation_is_caught(tmp_path: Path) -> None:
    run = run_suite("autograd", SELECTION, tmp_path, plant="lost_input_mutation")
    assert run.returncode == 1, run.output[-4000:]
    assert run.named("failed") == CAUGHT, run.outcomes
    assert run.named("passed") == UNAFFECTED
