"""The stack's tests, judged by compile-ci's rule (its suites are importable in a job) or by assert_close."""

import torch

from suites.judging import assert_close_to_reference


def reciprocal_chain(x: torch.Tensor) -> torch.Tensor:
    return torch.reciprocal(x) * 2 + 1


def test_reciprocal_of_negative_zero() -> None:
    # Wrong through the stack's own lowering only.
    x = torch.tensor([-0.0, 1.0, 2.0, -3.0])
    compiled = torch.compile(reciprocal_chain, backend="inductor")(x)
    assert_close_to_reference(compiled, reciprocal_chain(x), reciprocal_chain(x.double()))


SCALE = [1.0]


def scaled(x: torch.Tensor) -> torch.Tensor:
    return x * SCALE[0]


def test_reads_a_global_changed_after_compiling() -> None:
    # The test's own mistake: whatever compiles it, the compiled call saw the old global.
    x = torch.randn(8)
    compiled = torch.compile(scaled, backend="inductor")(x)
    SCALE[0] = 2.0
    try:
        eager = scaled(x)
    finally:
        SCALE[0] = 1.0
    torch.testing.assert_close(compiled, eager)


CALLS = [0]


def test_wrong_only_the_first_time() -> None:
    CALLS[0] += 1
    x = torch.randn(8)
    compiled = torch.compile(torch.sin, backend="inductor")(x)
    torch.testing.assert_close(compiled + (1.0 if CALLS[0] == 1 else 0.0), torch.sin(x))


KEPT = {}


def test_keeps_its_compiled_function() -> None:
    # Compiled once, kept across runs: a bisection cannot choose its backend.
    compiled = KEPT.setdefault("fn", torch.compile(reciprocal_chain, backend="inductor"))
    x = torch.tensor([-0.0, 4.0])
    assert_close_to_reference(compiled(x), reciprocal_chain(x), reciprocal_chain(x.double()))


def test_not_a_compiled_judgement() -> None:
    assert sum([1, 1]) == 3


RUNS = [0]


def test_wrong_for_its_first_four_runs() -> None:
    # Wrong as it ran, run again, with the stack's change taken out and under the eager backend; right from then
    # on, so the bisector's answer (eager) does not hold when checked.
    RUNS[0] += 1
    x = torch.randn(8)
    compiled = torch.compile(torch.cos, backend="inductor")(x)
    torch.testing.assert_close(compiled + (1.0 if RUNS[0] <= 4 else 0.0), torch.cos(x))
