"""Running one case: eager on every sample, then inductor on the samples in batches, each sample judged on its own.

Compiling costs far more than running, and inductor fuses independent pointwise work into one kernel: so the samples
of a case are compiled together, up to ``BATCH`` per graph (a graph whose outputs are each sample's result). Where a
batch fails to compile or run, its samples are compiled one by one, so an error is charged to the samples that
cause it. Each graph starts from a reset dynamo, so no recompile limit can quietly send a sample to eager.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from ..module_runs import flatten_outputs, to_fp64
from . import catalog, comparison, internals
from .tolerances import Tolerance

BATCH = 24
_SEED = 0


@dataclass(frozen=True)
class SampleFailure:
    index: int
    sample: str  # catalog.describe_sample
    problem: str


@dataclass(frozen=True)
class CaseRun:
    samples: int
    judged: int  # samples eager accepts (the others are inputs the op rejects: no result to compare)
    graphs: int
    failures: tuple[SampleFailure, ...]


def run_case(case: catalog.OpCase, device: str, tolerance_of: Callable[[torch.dtype], Tolerance]) -> CaseRun:
    fn = case.op.op
    samples = catalog.samples(case, device)
    accepted = [index for index, sample in enumerate(samples) if _eager_accepts(fn, sample)]
    outcomes: dict[int, tuple[Any, Any] | str] = {}  # index -> (eager, compiled), or why compiling failed
    graphs_before = internals.graph_count()
    budget_s = batch_budget_s()
    for start in range(0, len(accepted), BATCH):
        batch = accepted[start:start + BATCH]
        try:
            with _time_limit(budget_s):
                _run_batch(fn, samples, batch, outcomes)
        except _OverBudget:
            internals.reset_dynamo()  # the interrupted compile left nothing to reuse
            left = [index for index in accepted[start:] if index not in outcomes]
            outcomes.update({index: (f"not judged: a batch of {len(batch)} samples took more than {budget_s:g} s "
                                     f"to compile and run ({BATCH_SECONDS_ENV}); the case stopped there with "
                                     f"{len(left)} of {len(accepted)} samples left") for index in left})
            break
    graphs = internals.graph_count() - graphs_before
    failures = []
    values_matter = case.values_matter
    for index in accepted:
        outcome = outcomes.get(index)
        if outcome is None:  # eager refused it on the second run: nothing to compare
            continue
        if isinstance(outcome, str):
            problem: str | None = outcome
        else:
            reference = _float64_run(case, device, samples[index])
            problem = comparison.difference(*outcome, tolerance_of, samples[index], reference, values_matter)
        if problem:
            failures.append(SampleFailure(index, catalog.describe_sample(samples[index]), problem))
    return CaseRun(len(samples), len(accepted), graphs, tuple(failures))


BATCH_SECONDS_ENV = "COMPILE_CI_OPS_BATCH_SECONDS"
DEFAULT_BATCH_SECONDS = 120.0  # a batch takes 1-20 s on 2 cores; the slowest compile (unrolled pooling) took 12+ min


def batch_budget_s() -> float:
    """Seconds one batch of a case's samples may take to compile and run: a compile that takes longer stops the
    case, reported on the samples it left, instead of holding the whole job until its time limit. 0: no limit."""
    try:
        return max(0.0, float(os.environ.get(BATCH_SECONDS_ENV, DEFAULT_BATCH_SECONDS)))
    except ValueError:
        return DEFAULT_BATCH_SECONDS


class _OverBudget(BaseException):
    """Raised by the timer: a BaseException, so that no `except Exception` inside torch takes it for the op's."""


@contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """SIGALRM after `seconds`, raising _OverBudget; an outer timer (pytest-timeout's, say) that would fire first
    is left alone, and one that fires later is given back its remaining time and its handler afterwards."""
    outer_delay, outer_interval = signal.getitimer(signal.ITIMER_REAL)
    if seconds <= 0 or threading.current_thread() is not threading.main_thread() or 0 < outer_delay <= seconds:
        yield
        return

    def expired(_signum: int, _frame: object) -> None:
        raise _OverBudget

    started = time.monotonic()
    outer = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, outer)
        if outer_delay > 0:
            left = max(outer_delay - (time.monotonic() - started), 1e-3)
            signal.setitimer(signal.ITIMER_REAL, left, outer_interval)


def _eager_accepts(fn: Callable[..., Any], sample: Any) -> bool:
    try:
        catalog.call(fn, sample)
    except Exception:  # noqa: BLE001 - an input eager rejects has no result to compare with
        return False
    return True


def _run_batch(fn: Callable[..., Any], samples: list[Any], indices: list[int],
               outcomes: dict[int, tuple[Any, Any] | str]) -> None:
    """Eager, then inductor, on the batch from the same seed: random ops (falling back to eager's kernels) draw the
    same numbers in both, in the same order."""
    batch = [(samples[i].input, samples[i].args, samples[i].kwargs) for i in indices]
    torch.manual_seed(_SEED + indices[0])
    try:
        eager = _every_sample(fn)(batch)
    except Exception:  # noqa: BLE001 - accepted alone, refused after another sample's draws: judge them one by one
        for index in indices if len(indices) > 1 else ():
            _run_batch(fn, samples, [index], outcomes)
        return
    try:
        internals.reset_dynamo()
        torch.manual_seed(_SEED + indices[0])
        compiled = torch.compile(_every_sample(fn), backend="inductor")(batch)
    except Exception as exc:  # noqa: BLE001 - find which samples cause it
        if len(indices) == 1:
            outcomes[indices[0]] = f"the compiled op raised {type(exc).__name__}: {_first_lines(exc)}"
            return
        for index in indices:
            _run_batch(fn, samples, [index], outcomes)
        return
    outcomes.update(zip(indices, zip(eager, compiled, strict=True), strict=True))


def _every_sample(fn: Callable[..., Any]) -> Callable[[list[Any]], list[Any]]:
    def every_sample(batch: list[Any]) -> list[Any]:
        return [fn(sample_input, *args, **kwargs) for sample_input, args, kwargs in batch]

    return every_sample


def _float64_run(case: catalog.OpCase, device: str, sample: Any) -> comparison.Reference:
    """The op on the sample's floating tensors in float64, computed only when a comparison asks for it."""

    def run() -> list[Any] | None:
        if not case.dtype.is_floating_point or torch.float64 not in case.op.supported_dtypes(device):
            return None
        try:
            result = case.op.op(to_fp64(sample.input), *to_fp64(tuple(sample.args)), **to_fp64(dict(sample.kwargs)))
        except Exception:  # noqa: BLE001 - no float64 verdict: eager's result stands alone
            return None
        return [leaf for _path, leaf in flatten_outputs(result)]

    return run


_COMPILER_ERROR = re.compile(r"(?:internal compiler )?error: .*")


def _first_lines(exc: BaseException) -> str:
    """The exception's first lines and, for a C++ compile error, the compiler's own error lines (which come after
    the command line inductor ran): what went wrong, not only that it did."""
    text = str(exc).strip().splitlines()
    errors = [m.group(0).strip() for line in text if (m := _COMPILER_ERROR.search(line))][:2]
    head = " ".join(text[:2] if errors else text[:3])
    return (head + (" … " + " … ".join(errors) if errors else ""))[:600]
