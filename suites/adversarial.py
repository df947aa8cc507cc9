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

from . import harness, judging, module_runs, rounding_noise

# Largest |input| of the "large" variant per dtype. float32: logits around +-1e4 (exp(1e4) overflows without a max
# shift). float16: half its range. bfloat16 shares float32's range, where eager's fp32 accumulators would overflow
# too; at 2**60 (about 1.2e18) the squares of a 128-element row at that peak still sum below float32's 2**128, so
# eager's statistics stay finite and only a lowering that squares in a narrower type or sums exp() unshifted breaks.
LARGE = {torch.float32: 1e4, torch.float16: 0.5 * torch.finfo(torch.float16).max, torch.bfloat16: 2.0**60}
# "offset": mean 1e4 with a spread of about ten units in the last place at 1e4 (std 1e-2 in float32).
OFFSET_MEAN = 1e4
# "small": every element keeps its sign and gets its own magnitude, 10^-(SPAN × a uniform draw) times its own, so one
# tensor holds values from 1 down to 1e-8 (1e-4 in float16, above its smallest normal): normalised activations,
# gradients and probabilities near 0 live there, and so do cancelling rewrites, flushes and constant offsets that are
# right at magnitude 1 (issue 39).
SMALL_DECADES = {torch.float32: 8.0, torch.bfloat16: 8.0, torch.float16: 4.0}
OFFSET_SPREAD_FP32 = 1e-2


@dataclass(frozen=True)
class Variant:
    """One way to rewrite a case's example inputs: its test id, the dtype it runs in, and what it provokes."""

    name: str
    dtype: torch.dtype
    description: str

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
        "small": "magnitudes spread from 1 down to {small:.3g}",
        "nonfinite": "NaN, +inf and -inf in the first floating input",
    }
    # The well-scaled float32 inputs come first: the baseline each case must pass before its adversarial variants
    # mean anything (and what a planted bug must keep right).
    result = [Variant("fp32", torch.float32, "well-scaled inputs in float32"),
              Variant("lowp", low, f"well-scaled inputs in {low_name}")]
    for dtype, prefix, label in ((torch.float32, "", "float32"), (low, "lowp_", low_name)):
        result += [Variant(prefix + name, dtype, text.format(**_scales(dtype)) + f" ({label})")
                   for name, text in shapes.items()]
    return sorted(result, key=lambda v: v.dtype != torch.float32)


def _scales(dtype: torch.dtype) -> dict[str, float]:
    spread = OFFSET_SPREAD_FP32 * torch.finfo(dtype).eps / torch.finfo(torch.float32).eps
    return {"large": LARGE[dtype], "tiny": torch.finfo(dtype).tiny, "spread": spread,
            "small": 10.0 ** -SMALL_DECADES[dtype]}


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
    elif kind == "small":
        draw = torch.rand(wide.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        wide = wide / peak * 10.0 ** (-SMALL_DECADES[dtype] * draw.to(wide.device))
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


@dataclass(frozen=True)
class Verdict:
    """Per case and variant: leaves where compiled is too far off, and leaves where eager itself failed."""

    problems: list[str]
    eager_failures: list[str]


def judge(actual: Any, eager: Any, reference: Any, what: str = "output", rerun: Callable[[], Any] | None = None,
          nearby: Callable[[int], tuple[Any, Any]] | None = None) -> Verdict:
    """Judge every output leaf with the suites' rule (per element, in ULPs of the dtype: precision.py; integers and
    NaN/inf positions exactly); leaves where eager failed are set aside with the reason. ``rerun`` computes
    ``reference`` again, for the rounding noise of elements that fail without it; ``nearby``, eager's and the
    reference's results on nudged inputs (judging.differences_from_reference)."""
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
        problems += judging.differences_from_reference(
            a, e, r, what=path, rerun=rerun and _leaf_of(rerun, what, path),
            nearby=nearby and (lambda seed, path=path: tuple(_pick(v, what, path) for v in nearby(seed))))
    return Verdict(problems, failures)


def _pick(value: Any, what: str, path: str) -> Any:
    return dict(module_runs.flatten_outputs(value, what))[path]


def _leaf_of(rerun: Callable[[], Any], what: str, path: str) -> Callable[[], Any]:
    return lambda: _pick(rerun(), what, path)


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
    rerun: Callable[[], Any] | None = None  # the fp64 run again (its rounding noise is measured where needed)
    nearby: Callable[[int], tuple[Any, Any]] | None = None  # eager's and the fp64 run on nudged inputs


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
    upcast = module_runs.to_fp64(given)

    def rerun() -> Any:
        with torch.no_grad():
            torch.manual_seed(0)
            return reference(*module_runs.clone_inputs(upcast))

    def nearby(seed: int) -> tuple[Any, Any]:
        nudged = rounding_noise.nudge(given, seed)
        with torch.no_grad():
            torch.manual_seed(0)
            near = eager(*module_runs.clone_inputs(nudged))
            torch.manual_seed(0)
            return near, reference(*module_runs.to_fp64(nudged))

    return Outcome(actual, expected, rerun(), rerun=rerun, nearby=nearby)


def check(outcome: Outcome, variant: Variant, key: str | None = None) -> None:
    """Pass, fail or skip one case on one variant; ``key`` picks one entry of a dict output (a corpus layer)."""
    if outcome.eager_error is not None:
        pytest.skip(f"{variant.name} ({variant.description}): {outcome.eager_error}")
    actual, eager, reference, rerun = outcome.actual, outcome.eager, outcome.reference, outcome.rerun
    nearby, what = outcome.nearby, "output"
    if key is not None:
        actual, eager, reference, what = actual[key], eager[key], reference[key], key
        rerun = rerun and (lambda whole=rerun: whole()[key])
        nearby = nearby and (lambda seed, whole=nearby: tuple(v[key] for v in whole(seed)))
    conclude(judge(actual, eager, reference, what=what, rerun=rerun, nearby=nearby), variant)


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
