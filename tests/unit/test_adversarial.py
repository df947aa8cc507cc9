"""Adversarial variants of a case's inputs and the judgement that sets eager's failures aside (suites/adversarial)."""

from __future__ import annotations

import math

import pytest
import torch

from suites import adversarial


def _variant(name: str, device: str = "cpu") -> adversarial.Variant:
    return next(v for v in adversarial.variants(device) if v.name == name)


def test_variant_names_match_across_devices_and_low_precision_follows_the_device() -> None:
    cpu, cuda = adversarial.variants("cpu"), adversarial.variants("cuda")
    assert [v.name for v in cpu] == [v.name for v in cuda] == [
        "fp32", "large", "tiny", "offset", "small", "nonfinite",
        "lowp", "lowp_large", "lowp_tiny", "lowp_offset", "lowp_small", "lowp_nonfinite",
    ]
    assert {v.dtype for v in cpu} == {torch.float32, torch.bfloat16}
    assert {v.dtype for v in cuda} == {torch.float32, torch.float16}


def test_well_scaled_variants_keep_the_values_and_change_only_the_dtype() -> None:
    x = torch.randn(4, 7)
    assert torch.equal(_variant("fp32").apply((x,))[0], x)
    assert torch.equal(_variant("lowp").apply((x,))[0], x.to(torch.bfloat16))


@pytest.mark.parametrize(("name", "peak"), [("large", 1e4), ("lowp_large", 2.0**60)])
def test_large_scales_the_largest_magnitude_to_the_dtypes_target(name: str, peak: float) -> None:
    x, ids = _variant(name).apply((torch.randn(4, 7), torch.arange(3)))
    assert x.abs().max().item() == pytest.approx(peak, rel=1e-2)
    assert torch.equal(ids, torch.arange(3)), "integer inputs (targets, indices) are kept"


@pytest.mark.parametrize("name", ["tiny", "lowp_tiny"])
def test_tiny_inputs_are_denormal_but_not_zero(name: str) -> None:
    (x,) = _variant(name).apply((torch.randn(64),))
    assert (x.abs() < torch.finfo(x.dtype).tiny).all()
    assert (x != 0).sum() > 48, "most values must survive as denormals"


def test_offset_inputs_have_mean_1e4_and_a_spread_of_about_ten_ulps() -> None:
    (x,) = _variant("offset").apply((torch.randn(200),))
    assert x.double().mean().item() == pytest.approx(1e4, abs=1e-3)
    assert x.double().std().item() == pytest.approx(1e-2, rel=0.1)


@pytest.mark.parametrize(("name", "decades"), [("small", 8), ("lowp_small", 8)])
def test_small_gives_every_element_its_own_magnitude_down_to_the_smallest(name: str, decades: int) -> None:
    given = torch.randn(4000)
    x, ids = _variant(name).apply((given, torch.arange(3)))
    assert torch.equal(x.sign(), given.sign().to(x.dtype)), "every element keeps its sign"
    # each element's own value (relative to the largest) times its own factor of 10^-(0 .. decades)
    magnitudes = (x.double().abs() / (given.double().abs() / given.abs().max())).log10()
    assert magnitudes.max() <= 0.01 and magnitudes.min() >= -decades - 0.01, (magnitudes.min(), magnitudes.max())
    # spread over the decades, not bunched at one end: each decade holds about 1/decades of them
    counts = torch.histc(magnitudes, bins=decades, min=-decades, max=0)
    assert (counts > 4000 / decades / 3).all(), counts
    assert torch.equal(ids, torch.arange(3)), "integer inputs stay"


def test_nonfinite_goes_into_the_first_floating_input_only() -> None:
    x, y = _variant("nonfinite").apply((torch.randn(3, 5), torch.randn(4)))
    assert x.isnan().sum() == 1 and (x == math.inf).sum() == 1 and (x == -math.inf).sum() == 1
    assert torch.isfinite(y).all()


TINY = torch.full((6,), 3e-39)  # denormal in float32


@pytest.mark.parametrize(
    ("eager", "reference", "reason"),
    [
        (torch.tensor([1.0, math.inf]), torch.tensor([1.0, 2.0], dtype=torch.float64), "eager overflows"),
        (torch.tensor([math.nan, 1.0]), torch.tensor([math.inf, 1.0], dtype=torch.float64), "NaN/inf differ"),
        (torch.zeros(6), TINY.double(), "eager loses every digit"),
        (torch.tensor([math.nan, 1.0]), torch.tensor([math.nan, 1.0], dtype=torch.float64), None),
        (TINY, TINY.double(), None),
    ],
)
def test_eager_failures_are_named(eager: torch.Tensor, reference: torch.Tensor, reason: str | None) -> None:
    found = adversarial.eager_failure(eager, reference)
    assert (found is None) if reason is None else (reason in (found or "")), found


def test_a_flushed_denormal_fails_where_the_absolute_floor_would_pass() -> None:
    verdict = adversarial.judge(torch.zeros(6), TINY, TINY.double())
    assert len(verdict.problems) == 1 and "6 of 6 elements differ" in verdict.problems[0], verdict.problems
    assert adversarial.judge(TINY.clone(), TINY, TINY.double()) == adversarial.Verdict([], [])


def test_leaves_where_eager_failed_are_set_aside_and_the_rest_judged() -> None:
    eager = {"ok": torch.ones(3), "overflow": torch.tensor([math.inf])}
    reference = {"ok": torch.ones(3, dtype=torch.float64), "overflow": torch.tensor([1e39], dtype=torch.float64)}
    right = adversarial.judge({"ok": torch.ones(3), "overflow": torch.tensor([5.0])}, eager, reference)
    assert right.problems == [] and right.eager_failures[0].startswith("output['overflow']: eager overflows")
    wrong = adversarial.judge({"ok": torch.tensor([1.0, math.nan, 1.0]), "overflow": torch.ones(1)}, eager, reference)
    assert len(wrong.problems) == 1 and "non-finite" in wrong.problems[0]


def test_conclude_fails_on_problems_skips_on_eager_failures_and_passes_otherwise() -> None:
    variant = _variant("large")
    with pytest.raises(pytest.fail.Exception, match=r"\[large: magnitudes up to 1e\+04 \(float32\)\] bad"):
        adversarial.conclude(adversarial.Verdict(["bad"], ["eager overflows"]), variant)
    with pytest.raises(pytest.skip.Exception, match="eager overflows"):
        adversarial.conclude(adversarial.Verdict([], ["eager overflows"]), variant)
    adversarial.conclude(adversarial.Verdict([], []), variant)


def test_an_eager_error_skips_the_variant_and_a_compiled_one_propagates() -> None:
    def refuses_nonfinite(x: torch.Tensor) -> torch.Tensor:
        if not torch.isfinite(x).all():
            raise ValueError("inputs must be finite")
        return x * 2

    outcome = adversarial.run_variant(refuses_nonfinite, torch.neg, refuses_nonfinite, (torch.ones(3),),
                                      _variant("nonfinite"))
    assert outcome.eager_error == "eager raised ValueError: inputs must be finite"
    with pytest.raises(pytest.skip.Exception, match="inputs must be finite"):
        adversarial.check(outcome, _variant("nonfinite"))
    with pytest.raises(ZeroDivisionError):
        adversarial.run_variant(torch.neg, lambda x: 1 / 0, torch.neg, (torch.ones(3),), _variant("large"))
