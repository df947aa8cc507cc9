"""The one numeric rule (issue 39, suites/precision.py): each element's distance to float64 in ULPs of its own dtype,
compiled ≤ k × max(eager, noise) + c; NaN/inf and zero signs exactly eager's. Pure: no compiler, a few ms each."""

from __future__ import annotations

import math
import random

import pytest
import torch

from suites import judging, precision, rounding_noise

F32 = precision.Bound(2, 4)  # a fixed bound, so these cases do not move when the calibrated table does
BF16 = precision.Bound(2, 2)


def _judge(compiled: list[float], eager: list[float], exact: list[float], dtype: torch.dtype = torch.float32,
           bound: precision.Bound = F32) -> precision.Finding | None:
    return precision.judge(torch.tensor(compiled, dtype=dtype), torch.tensor(eager, dtype=dtype),
                           torch.tensor(exact, dtype=torch.float64), bound)


@pytest.mark.parametrize(("dtype", "value", "spacing"), [
    (torch.float32, 1.0, 2.0**-23), (torch.float32, 0.75, 2.0**-24), (torch.float32, 3e-39, 2.0**-149),
    (torch.float32, 0.0, 2.0**-149), (torch.float32, 1.2e-38, 2.0**-149), (torch.float32, 1.1754944e-38, 2.0**-149),
    (torch.bfloat16, 1.0, 2.0**-7), (torch.bfloat16, 1e-39, 2.0**-133), (torch.float16, 1.0, 2.0**-10),
    (torch.float16, 1e-7, 2.0**-24), (torch.float16, 70000.0, 64.0),
])
def test_the_spacing_is_the_dtypes_at_that_value_subnormals_included(dtype: torch.dtype, value: float,
                                                                   spacing: float) -> None:
    assert precision.spacing(torch.tensor([value, -value], dtype=torch.float64), dtype).tolist() == [spacing] * 2


# (case, compiled, eager, float64, differs). Each red one is within the sweep's old atol = 1e-5 of eager.
CASES = [
    ("expm1 as exp(x) - 1 at 1e-8 (stock inductor's vectorised CPU expm1)", [0.0, 1.7182817], [1e-8, 1.7182818],
     [1e-8, 1.718281828459045], True),
    ("a 1e-6 constant at 1e-3", [1e-3 + 1e-6], [1e-3], [1e-3], True),
    ("the same 1e-6 constant at 1e4 is below the last place", [1e4 + 1e-6], [1e4], [1e4], False),
    ("a flush below 1e-6", [0.0, 0.5], [3e-7, 0.5], [3e-7, 0.5], True),
    ("the wrong sign of a small result", [-2e-7, 1.0], [2e-7, 1.0], [2e-7, 1.0], True),
    ("a last-place difference at 1e-30, as at 1", [1.0000001e-30, 1.0000001], [1e-30, 1.0], [1e-30, 1.0], False),
    ("a subnormal result off by 3 units of the smallest subnormal", [3e-45 + 4.2e-45], [3e-45], [3e-45], False),
    ("a subnormal result off by a normal-sized amount", [1e-39], [1e-40], [1e-40], True),
    ("compiled closer to float64 than eager", [0.1], [0.10000002], [0.1], False),
    ("eager 100 ULPs off, compiled 150", [1.0 + 150 * 2**-23], [1.0 + 100 * 2**-23], [1.0], False),
    ("eager 100 ULPs off, compiled 250", [1.0 + 250 * 2**-23], [1.0 + 100 * 2**-23], [1.0], True),
    ("NaN where eager has a number", [math.nan], [1.0], [1.0], True),
    ("+inf where eager saturates at the largest float and float64 rounds to inf", [math.inf],
     [3.4028234663852886e38], [3.5e38], True),
    ("-0.0 where eager has +0.0", [-0.0], [0.0], [0.0], True),
    ("NaN and inf where eager has them", [math.nan, -math.inf, -0.0], [math.nan, -math.inf, -0.0],
     [math.nan, -math.inf, -0.0], False),
    ("nan_to_num(-inf)'s sign flipped: float64's -1.8e308 is no float32, eager's value is the answer",
     [3.4028234663852886e38], [-3.4028234663852886e38], [-1.7976931348623157e308], True),
]


@pytest.mark.parametrize(("compiled", "eager", "exact", "differs"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_small_results_are_held_as_strictly_as_large_ones(compiled: list[float], eager: list[float],
                                                          exact: list[float], differs: bool) -> None:
    finding = _judge(compiled, eager, exact)
    assert (finding is not None) == differs, finding


def test_a_failure_names_the_element_the_three_values_both_distances_and_the_bound() -> None:
    finding = _judge([1.0, 0.0, 2.0], [1.0, 1e-8, 2.0], [1.0, 1e-8, 2.0])
    assert finding is not None and finding.index == (1,)
    text = finding.describe("input = 1e-08")
    assert text.startswith("1 of 3 elements differ (1 beyond the bound); at [1]: compiled 0.0, eager "
                           "9.99999993922529e-09, float64 1e-08; compiled 1.126e+07 ULPs from float64, eager 0.06843: "
                           "more than "), text
    assert text.endswith("= 2 × eager + 4 ULPs of float32; inputs there: input = 1e-08"), text


def test_the_rmse_is_only_a_summary_line() -> None:
    # One element of 1e-8 entirely wrong in a tensor of ones: the RMSE rule passed it, the element fails.
    compiled, eager, exact = torch.ones(100), torch.ones(100), torch.ones(100, dtype=torch.float64)
    eager[7], exact[7] = 1e-8, 1e-8
    compiled[7] = 0.0
    lines = judging.differences_from_reference(compiled, eager, exact)
    assert len(lines) == 1 and "at [7]: compiled 0.0" in lines[0] and "RMSE vs float64: compiled 1e-09" in lines[0]


def _cancelling_rows() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    a, b = torch.randn(6, 256), torch.randn(256, 5)
    b[:, 0] -= (a[0] @ b[:, 0]) / a[0].dot(a[0]) * a[0]  # element [0, 0] is a sum of O(1) terms that cancel to ~0
    return a, b


def test_an_element_whose_terms_cancel_is_held_to_their_rounding_noise() -> None:
    a, b = _cancelling_rows()
    exact = a.double() @ b.double()
    eager = a @ b
    reordered = (a.flip(1) @ b.flip(0))  # the same sums in the opposite order: as correct, other roundings
    measured = rounding_noise.measure(lambda: [a.double() @ b.double()], [exact], torch.float32)[0]
    noise_ulps = measured[0, 0] / precision.spacing(exact[0, 0], torch.float32)
    assert noise_ulps > 1e3, "the cancelling element's noise is many of its own ULPs"
    wrong = eager.clone()
    wrong[0, 0] += 1e3 * measured[0, 0].item()
    assert precision.judge(wrong, eager, exact, F32, measured) is not None, "far beyond the noise is still wrong"
    assert precision.judge(reordered, eager, exact, F32, measured) is None


def test_elementwise_functions_get_no_noise_beyond_their_own_rounding() -> None:
    # expm1 of exact inputs near 0: the noise model rounds its result once (about half a unit), so exp(x) - 1 fails.
    x = torch.tensor([1e-8, 1e-4, 0.5])
    exact = torch.expm1(x.double())
    measured = rounding_noise.measure(lambda: [torch.expm1(x.double())], [exact], torch.float32)[0]
    assert (measured / precision.spacing(exact, torch.float32)).max() <= 1.0
    assert precision.judge(torch.exp(x) - 1, torch.expm1(x), exact, F32, measured) is not None


def test_eager_at_nearby_inputs_counts_as_eagers_error_where_it_was_lucky() -> None:
    # GELU by 0.5 x (1 + erf(x / sqrt 2)) cancels for x < -1: eager is many ULPs off at most inputs near -3.
    def gelu(t: torch.Tensor) -> torch.Tensor:
        return 0.5 * t * (1 + torch.erf(t / math.sqrt(2)))

    x = torch.full((1,), -3.0)

    def nearby(seed: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        (moved,) = rounding_noise.nudge((x,), seed)
        return [gelu(moved)], [gelu(moved.double())]

    own = rounding_noise.eager_nearby(nearby, 1)[0]
    assert own is not None and (own / precision.spacing(gelu(x.double()), torch.float32)).item() > 10
    assert rounding_noise.nudge((torch.tensor([0.0, 1.0, math.inf]),), 0)[0][[0, 2]].tolist() == [0.0, math.inf]


def test_only_bf16_may_flush_below_its_smallest_normal() -> None:
    assert _judge([0.0], [5e-40], [5e-40], torch.bfloat16, BF16) is None
    assert _judge([0.0], [5e-40], [5e-40], torch.float32) is not None
    assert _judge([0.0], [2e-38], [2e-38], torch.bfloat16, BF16) is not None


def test_any_element_off_by_more_than_the_bound_is_named_and_any_within_passes() -> None:
    """Random tensors of random sizes and magnitudes (seeded, printed): an element moved by more than the bound
    fails at that element; the float64 value rounded to float32 (at most half a unit) always passes."""
    seed = random.randrange(2**32)
    print("seed", seed)
    rng = torch.Generator().manual_seed(seed)
    for _ in range(50):
        n = int(torch.randint(1, 400, (1,), generator=rng))
        exact = torch.randn(n, generator=rng, dtype=torch.float64) * 10.0 ** torch.randint(-30, 30, (n,),
                                                                                           generator=rng)
        eager = exact.float()
        assert precision.judge(exact.float(), eager, exact, F32) is None
        at = int(torch.randint(0, n, (1,), generator=rng))
        wrong = eager.clone()
        step = precision.spacing(exact[at:at + 1], torch.float32).item()
        wrong[at] = float(exact[at]) + (F32.c + 2) * step * (1 if torch.rand(1, generator=rng) < 0.5 else -1)
        finding = precision.judge(wrong, eager, exact, F32)
        assert finding is not None and finding.index == (at,), (seed, n, at, finding)
