"""Adversarial inputs for numerically fragile compilers (issue 15): named variants of a case's example inputs
(large magnitudes, denormals, large offsets with small spread, NaN/inf, low precision), and the judgement of a
compiled result on them against eager and an fp64 reference, where eager's own failures skip rather than pass.

A lowering can be right on well-scaled random inputs and still be fragile: exp-based reductions without a max shift
overflow on large logits, variance by E[x^2] - E[x]^2 cancels catastrophically on offset inputs, fp16/bf16
intermediates overflow where eager's stay in fp32, NaN/inf positions move, denormals are flushed. Each variant below
provokes one of these. Public torch APIs only (private ones live in ``harness.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from . import harness, judging, module_runs

# Largest |input| of the "large" variant per dtype. float32: logits around +-1e4 (exp(1e4) overflows without a max
# shift). float16: half its range. bfloat16 shares float32's range, where eager's fp32 accumulators would overflow
# too; at 2**60 (about 1.2e18) the squares of a 128-element row at that peak still sum below float32's 2**128, so
# eager's statistics stay finite and only a lowering that squares in a narrower type or sums exp() unshifted breaks.
LARGE = {torch.float32: 1e4, torch.float16: 0.5 * torch.finfo(torch.float16).max, torch.bfloat16: 2.0**60}
# "offset": mean 1e4 with a spread of about ten units in the last place at 1e4 (std 1e-2 in float32).
OFFSET_MEAN = 1e4
OFFSET_SPREAD_FP32 = 1e-2


@dataclass(frozen=True)
class Variant:
    """One way to rewrite a case's example inputs: its test id, the dtype it runs in, and what it provokes."""

    name: str
    dtype: torch.dtype
    description: str
    # Relative precision the rewritten inputs carry: offset inputs hold only ~10 units in the last place of spread,
    # so any kernel that rounds their mean to the working dtype (eager's included) is off by up to ~12 % of the
    # output's scale; the judgement's floor adds this much of the reference's RMS (0 for the other variants).
    resolution: float = 0.0

    def apply(self, inputs: tuple[Any, ...]) -> tuple[Any, ...]:
        """The example inputs in this variant's dtype and shape of values; integer inputs are kept as they are.
        NaN/inf go into the first floating input only, so the other inputs show how far they spread."""
        floating = [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and x.is_floating_point()]
        rewritten = list(inputs)
        for i in floating:
            rewritten[i] = _rewrite(self.name.removeprefix("lowp_"), inputs[i].detach(), self.dtype, i == floating[0])
        return tuple(x.detach() if isinstance(x, torch.Tensor) else x for x in rewritten)


def low_precision_dtype(device: str) -> torch.dtype:
    """fp16 on CUDA (its training dtype there), bf16 on CPU (inductor's CPU backend has no fast fp16 path)."""
    return torch.float16 if device == "cuda" else torch.bfloat16


def variants(device: str) -> list[Variant]:
    """Every variant: float32 first, then the low-precision dtype, each with its well-scaled inputs as they are."""
    low = low_precision_dtype(device)
    low_name = str(low).removeprefix("torch.")
    shapes = {
        "large": "magnitudes up to {large:.3g}",
        "tiny": "denormal magnitudes (below {tiny:.3g})",
        "offset": "mean 1e4 with spread {spread:.3g}",
        "nonfinite": "NaN, +inf and -inf in the first floating input",
    }
    # The well-scaled float32 inputs come first: the baseline each case must pass before its adversarial variants
    # mean anything (and what a planted bug must keep right).
    result = [Variant("fp32", torch.float32, "well-scaled inputs in float32"),
              Variant("lowp", low, f"well-scaled inputs in {low_name}")]
    for dtype, prefix, label in ((torch.float32, "", "float32"), (low, "lowp_", low_name)):
        resolution = torch.finfo(dtype).eps * OFFSET_MEAN / _scales(dtype)["spread"]
        result += [
            Variant(prefix + name, dtype, text.format(**_scales(dtype)) + f" ({label})",
                    resolution if name == "offset" else 0.0)
            for name, text in shapes.items()
        ]
    return sorted(result, key=lambda v: v.dtype != torch.float32)


def _scales(dtype: torch.dtype) -> dict[str, float]:
    spread = OFFSET_SPREAD_FP32 * torch.finfo(dtype).eps / torch.finfo(torch.float32).eps
    return {"large": LARGE[dtype], "tiny": torch.finfo(dtype).tiny, "spread": spread}


def _rewrite(kind: str, x: torch.Tensor, dtype: torch.dtype, first: bool) -> torch.Tensor:
    # Scaled in float64, rounded once to the target dtype, so a value lands on the nearest representable number.
    wide = x.to(torch.float64)
    peak = wide.abs().max().item() if wide.numel() else 0.0
    peak = peak if math.isfinite(peak) and peak > 0 else 1.0
    scales = _scales(dtype)
    if kind == "large":
        wide = wide * (scales["large"] / peak)
    elif kind == "tiny":
        wide = wide * (0.5 * scales["tiny"] / peak)
    elif kind == "offset":
        spread = wide.std().item() if wide.numel() > 1 else 0.0
        centred = (wide - wide.mean()) / spread if spread > 0 and math.isfinite(spread) else torch.zeros_like(wide)
        wide = OFFSET_MEAN + scales["spread"] * centred
    elif kind == "nonfinite" and first and wide.numel():
        flat = wide.reshape(-1).clone()
        positions = (0, flat.numel() // 2, flat.numel() - 1)  # may coincide in tiny tensors: the last one wins
        for position, value in zip(positions, (math.nan, math.inf, -math.inf), strict=True):
            flat[position] = value
        wide = flat.reshape(wide.shape)
    return wide.to(dtype)


# --- judgement --------------------------------------------------------------------------------------------------------


def _rms(t: torch.Tensor) -> float:
    return math.sqrt(t.square().mean().item()) if t.numel() else 0.0


def eager_failure(eager: Any, reference: Any) -> str | None:
    """Why eager itself failed on this output leaf, or None: an overflow (NaN/inf where the fp64 reference is
    finite), other NaN/inf than the reference's, or an error as large as the reference itself (no correct digit
    left to compare a compiler against)."""
    if not isinstance(eager, torch.Tensor) or not eager.is_floating_point() or not isinstance(reference, torch.Tensor):
        return None
    eager64, reference64 = eager.to(torch.float64), reference.to(torch.float64)
    overflow = ~torch.isfinite(eager64) & torch.isfinite(reference64)
    if overflow.any():
        return f"eager overflows ({int(overflow.sum())} of {overflow.numel()} values NaN/inf where fp64 is finite)"
    # e.g. eager's vectorised CPU GELU gives NaN for +inf where the fp64 kernel (and the limit) give +inf
    same = (eager64 == reference64) | (eager64.isnan() & reference64.isnan())
    wrong = ~torch.isfinite(reference64) & ~same
    if wrong.any():
        index = tuple(int(i) for i in wrong.nonzero()[0])
        return (
            f"eager's NaN/inf differ from fp64's at {int(wrong.sum())} of {wrong.numel()} values "
            f"(at {index}: eager {eager64[index].item()}, fp64 {reference64[index].item()})"
        )
    finite = torch.isfinite(reference64)
    error, scale = _rms((eager64 - reference64)[finite]), _rms(reference64[finite])
    if scale > 0 and error >= scale:
        return f"eager loses every digit (RMSE vs fp64 {error:.3g} >= the reference's RMS {scale:.3g})"
    return None


# The RMSE floor, relative to each leaf's RMS (see leaf_floor). 1e-3: the variants look for gross failures (overflow,
# NaN, flushed or cancelled digits are off by 100 %), and amplified last-place differences must not count, e.g. a
# training-mode BatchNorm whose variance underflows on denormal inputs scales a one-ulp difference in its mean
# (inductor sums in fp32 where eager's CPU kernel sums in double) by 1/sqrt(eps) = 316.
RELATIVE_FLOOR = 1e-3


def leaf_floor(reference: Any, eager: Any, resolution: float = 0.0) -> float:
    """The RMSE floor for one leaf, scaled to its size: magnitudes here span 1e-40 to 1e18, where the suites' absolute
    1e-5 would accept a flushed denormal and demand more than float32 can hold at 1e18. The dtype's smallest
    subnormal keeps the floor above zero for all-zero references."""
    if not isinstance(reference, torch.Tensor) or not reference.is_floating_point():
        return judging.RMSE_FLOOR
    reference64 = reference.to(torch.float64)
    dtype = eager.dtype if isinstance(eager, torch.Tensor) and eager.is_floating_point() else torch.float32
    scale = _rms(reference64[torch.isfinite(reference64)])
    return (RELATIVE_FLOOR + resolution) * scale + _smallest_subnormal(dtype)


def _smallest_subnormal(dtype: torch.dtype) -> float:
    # finfo.smallest_subnormal is newer than some torch versions the suites support; 2**(min_exp - mantissa bits).
    info = torch.finfo(dtype)
    return float(getattr(info, "smallest_subnormal", info.tiny * info.eps))


@dataclass(frozen=True)
class Verdict:
    """Per case and variant: leaves where compiled is too far off, and leaves where eager itself failed."""

    problems: list[str]
    eager_failures: list[str]


def judge(actual: Any, eager: Any, reference: Any, what: str = "output", resolution: float = 0.0) -> Verdict:
    """Judge every output leaf with the suites' rule (integers and NaN/inf positions exactly, RMSE within 2 x eager's
    + a floor scaled to the leaf); leaves where eager failed are set aside with the reason."""
    actual_leaves = module_runs.flatten_outputs(actual, what)
    eager_leaves = module_runs.flatten_outputs(eager, what)
    reference_leaves = module_runs.flatten_outputs(reference, what)
    if [p for p, _ in actual_leaves] != [p for p, _ in eager_leaves] or len(reference_leaves) != len(eager_leaves):
        return Verdict(judging.differences_from_reference(actual, eager, reference, what=what), [])
    problems: list[str] = []
    failures: list[str] = []
    for (path, a), (_, e), (_, r) in zip(actual_leaves, eager_leaves, reference_leaves, strict=True):
        reason = eager_failure(e, r)
        if reason is not None:
            failures.append(f"{path}: {reason}")
            continue
        problems += judging.differences_from_reference(a, e, r, floor=leaf_floor(r, e, resolution), what=path)
    return Verdict(problems, failures)


def conclude(verdict: Verdict, variant: Variant) -> None:
    """Fail on any leaf the compiler got wrong; otherwise skip when eager failed on some leaf (not the compiler's
    failure, and not a pass either); otherwise return (a pass)."""
    if verdict.problems:
        judging.fail_on_differences([f"[{variant.name}: {variant.description}] {p}" for p in verdict.problems])
    if verdict.eager_failures:
        pytest.skip(f"{variant.name} ({variant.description}): " + "; ".join(verdict.eager_failures))


@dataclass(frozen=True)
class Outcome:
    """One case run on one variant: compiled, eager and fp64 results, or why eager could not take the input."""

    actual: Any = None
    eager: Any = None
    reference: Any = None
    eager_error: str | None = None


def run_variant(
    eager: Callable[..., Any],
    compiled: Callable[..., Any],
    reference: Callable[..., Any],
    inputs: tuple[Any, ...],
    variant: Variant,
) -> Outcome:
    """Run the three forms of a case on ``variant`` of its example inputs (``reference`` takes them in float64), each
    from the same seed, without autograd. An exception from eager means the case does not admit the input (a model
    that asserts finite inputs, say): recorded, not raised; one from the compiled form propagates (a compiler bug)."""
    given = variant.apply(inputs)
    with torch.no_grad():
        torch.manual_seed(0)
        try:
            expected = eager(*module_runs.clone_inputs(given))
        except Exception as exc:  # noqa: BLE001 - any eager error makes the variant inapplicable, not a compiler bug
            return Outcome(eager_error=f"eager raised {type(exc).__name__}: {exc}"[:500])
        torch.manual_seed(0)
        actual = compiled(*module_runs.clone_inputs(given))
        torch.manual_seed(0)
        fp64 = reference(*module_runs.to_fp64(given))
    return Outcome(actual, expected, fp64)


def check(outcome: Outcome, variant: Variant, key: str | None = None) -> None:
    """Pass, fail or skip one case on one variant; ``key`` picks one entry of a dict output (a corpus layer)."""
    if outcome.eager_error is not None:
        pytest.skip(f"{variant.name} ({variant.description}): {outcome.eager_error}")
    actual, eager, reference = outcome.actual, outcome.eager, outcome.reference
    what = "output"
    if key is not None:
        actual, eager, reference, what = actual[key], eager[key], reference[key], key
    conclude(judge(actual, eager, reference, what=what, resolution=variant.resolution), variant)


def compile_once_fixtures(*caches: dict[Any, Any]) -> tuple[Any, Any]:
    """The two fixtures of a module whose variants share one compiled graph per case and dtype: a per-test fixture
    that overrides conftest's per-test dynamo reset (a variant changes input values only, never shapes or dtypes,
    so one compile serves every variant), and a module-scoped one that resets dynamo around the module and empties
    the module's ``caches`` after it. Assign both at module level: ``fresh_compile_state, _once = ...``."""

    @pytest.fixture(autouse=True)
    def fresh_compile_state() -> Iterator[None]:
        torch.manual_seed(0)
        yield

    @pytest.fixture(autouse=True, scope="module")
    def compiled_once_per_module() -> Iterator[None]:
        with harness.fresh_compile_state():
            yield
        for cache in caches:
            cache.clear()

    return fresh_compile_state, compiled_once_per_module


def parametrize_declared(metafunc: pytest.Metafunc, fixture: str, entries: Iterable[Any], loaded: type) -> None:
    """One test per declared entry and variant (``<test_id>-<variant>``); an entry that failed to load (not a
    ``loaded``) gets one entry without a variant, for the test to skip with its reason. No entries: the module's
    ``fixture`` skips once."""
    names = [variant.name for variant in variants("cpu")]
    pairs: list[tuple[Any, str | None]] = []
    for entry in entries:
        pairs += [(entry, name) for name in names] if isinstance(entry, loaded) else [(entry, None)]
    if pairs:
        ids = [f"{entry.test_id}-{name}" if name else entry.test_id for entry, name in pairs]
        metafunc.parametrize(fixture, pairs, ids=ids)
