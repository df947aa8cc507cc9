"""Running one case: eager on every sample, then inductor on the samples in batches, each sample judged on its own.

Compiling costs far more than running, and inductor fuses independent pointwise work into one kernel: so the samples
of a case are compiled together, up to ``BATCH`` per graph (a graph whose outputs are each sample's result). Where a
batch fails to compile or run, its samples are compiled one by one, so an error is charged to the samples that
cause it. Each graph starts from a reset dynamo, so no recompile limit can quietly send a sample to eager.

Every run (the check that eager accepts a sample, eager, inductor, float64) gets its own copy of each sample, made
from the untouched original one sample at a time: an op that writes to its arguments (``batch_norm``'s running
statistics in training) then meets the same values in every run, and OpInfo samples that share a tensor (samples 7
to 10 of ``batch_norm`` share their running statistics) do not change each other. What the op left in its tensor
arguments is compared too, wherever eager or inductor changed one: a wrong in-place update is a failure.
"""

from __future__ import annotations

import copy
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

from .. import alarm, device_context, precision, rounding_noise
from ..module_runs import flatten_outputs, to_fp64
from . import catalog, comparison, internals

BATCH = 24
_SEED = 0


@dataclass(frozen=True)
class SampleFailure:
    index: int
    sample: str  # catalog.describe_sample
    problem: str


class DeviceLost(Exception):
    """A batch trapped on the device (a device-side assert): the process's CUDA context is gone, so no sample of the
    case can be judged further here; the job's tests after this one run in a fresh process (suites/device_context)."""


@dataclass(frozen=True)
class CaseRun:
    samples: int
    judged: int  # samples eager accepts (the others are inputs the op rejects: no result to compare)
    graphs: int
    failures: tuple[SampleFailure, ...]


def run_case(case: catalog.OpCase, device: str, bound_of: Callable[[torch.dtype], precision.Bound]) -> CaseRun:
    fn = case.op.op
    samples = catalog.samples(case, device)
    accepted = [index for index, sample in enumerate(samples) if _eager_accepts(fn, copy.deepcopy(sample))]
    outcomes: dict[int, tuple[Any, Any] | str] = {}  # index -> (eager, compiled), or why compiling failed
    graphs_before = internals.graph_count()
    budget_s = batch_budget_s()
    for start in range(0, len(accepted), BATCH):
        batch = accepted[start:start + BATCH]
        try:
            with _time_limit(budget_s):
                _run_batch(fn, samples, batch, outcomes)
        except DeviceLost as lost:
            raise DeviceLost(f"samples {batch[0]}-{batch[-1]} ({len(batch)} compiled into one graph) trapped on "
                             f"{device}: {lost}; the case's samples are not judged") from None
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
            eager, compiled = outcome
            reference = _float64_run(case, device, samples[index], isinstance(eager, dict))
            nearby = _nearby_run(case, device, samples[index], isinstance(eager, dict))
            with precision.labelled(f"sample {index}"):
                problem = comparison.difference(eager, compiled, bound_of, samples[index], reference, values_matter,
                                                nearby)
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

    def expire() -> None:
        raise _OverBudget

    started = time.monotonic()
    outer = signal.signal(signal.SIGALRM, alarm.handler(expire))  # never inside an import (suites/alarm.py)
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
    same numbers in both, in the same order. Each run on its own copies of the samples (see the module's doc)."""
    eager_batch, compiled_batch = _copies(samples, indices), _copies(samples, indices)
    torch.manual_seed(_SEED + indices[0])
    try:
        eager = _every_sample(fn)(eager_batch)
    except Exception:  # noqa: BLE001 - accepted alone, refused after another sample's draws: judge them one by one
        for index in indices if len(indices) > 1 else ():
            _run_batch(fn, samples, [index], outcomes)
        return
    try:
        internals.reset_dynamo()
        torch.manual_seed(_SEED + indices[0])
        compiled = torch.compile(_every_sample(fn), backend="inductor")(compiled_batch)
    except Exception as exc:  # noqa: BLE001 - find which samples cause it
        trapped = device_context.device_error()
        if trapped:  # nothing more runs on this device in this process: no sample can be retried alone
            raise DeviceLost(trapped) from exc
        if len(indices) == 1:
            outcomes[indices[0]] = f"the compiled op raised {type(exc).__name__}: {_first_lines(exc)}"
            return
        for index in indices:
            _run_batch(fn, samples, [index], outcomes)
        return
    trapped = device_context.device_error()  # a kernel's trap is reported at a later call: here, not at the next case
    if trapped:
        raise DeviceLost(trapped)
    for index, eager_run, compiled_run, eager_result, compiled_result in zip(
            indices, eager_batch, compiled_batch, eager, compiled, strict=True):
        written = _written(samples[index], eager_run) | _written(samples[index], compiled_run)
        if written:  # what the op left in the arguments it wrote, beside what it returned
            outcomes[index] = (_with_arguments(eager_result, eager_run, written),
                               _with_arguments(compiled_result, compiled_run, written))
        else:
            outcomes[index] = (eager_result, compiled_result)


def _every_sample(fn: Callable[..., Any]) -> Callable[[list[Any]], list[Any]]:
    def every_sample(batch: list[Any]) -> list[Any]:
        return [fn(sample_input, *args, **kwargs) for sample_input, args, kwargs in batch]

    return every_sample


def _copies(samples: list[Any], indices: list[int]) -> list[tuple[Any, tuple[Any, ...], dict[str, Any]]]:
    """(input, args, kwargs) of each sample, deep-copied one sample at a time: shared within a sample, not across."""
    return [copy.deepcopy((samples[i].input, tuple(samples[i].args), dict(samples[i].kwargs))) for i in indices]


def _arguments(input_: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The top-level tensor arguments by the name a message shows (``input``, ``arg 1``, a keyword)."""
    named = {"input": input_, **{f"arg {i}": a for i, a in enumerate(args)}, **kwargs}
    return {name: value for name, value in named.items() if isinstance(value, torch.Tensor)}


def _written(original: Any, run: tuple[Any, tuple[Any, ...], dict[str, Any]]) -> frozenset[str]:
    """The tensor arguments whose values a run changed (NaNs equal to NaNs)."""
    before = _arguments(original.input, tuple(original.args), dict(original.kwargs))
    after = _arguments(*run)
    return frozenset(name for name, value in after.items() if name in before and not _same(before[name], value))


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not (a.is_floating_point() or a.is_complex()):
        return torch.equal(a.cpu(), b.cpu())
    a, b = a.detach().cpu(), b.detach().cpu()
    return torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))


def _with_arguments(result: Any, run: tuple[Any, tuple[Any, ...], dict[str, Any]],
                    written: frozenset[str]) -> dict[str, Any]:
    arguments = _arguments(*run)
    return {"returned": result, **{f"{name} after the call": arguments[name] for name in sorted(written)}}


def _float64_run(case: catalog.OpCase, device: str, sample: Any, with_arguments: bool) -> comparison.Reference:
    """The op on a copy of the sample with its floating tensors in float64, computed only when a comparison asks for
    it; ``with_arguments``: shaped as the compared runs were, with what the op left in its tensor arguments."""

    def run() -> list[Any] | None:
        if not case.dtype.is_floating_point or torch.float64 not in case.op.supported_dtypes(device):
            return None
        input_, args, kwargs = copy.deepcopy((sample.input, tuple(sample.args), dict(sample.kwargs)))
        run64 = (to_fp64(input_), to_fp64(args), to_fp64(kwargs))
        try:
            result = case.op.op(run64[0], *run64[1], **run64[2])
        except Exception:  # noqa: BLE001 - no float64 verdict: eager's result stands alone
            return None
        if with_arguments:
            result = _with_arguments(result, run64, frozenset(_arguments(*run64)))
        return [leaf for _path, leaf in flatten_outputs(result)]

    return run


def _nearby_run(case: catalog.OpCase, device: str, sample: Any, with_arguments: bool) -> rounding_noise.Nearby:
    """Eager's and the float64 run's output leaves (shaped as ``_float64_run``'s) on the sample with its floating
    inputs nudged to adjacent values (``rounding_noise.nudge``): eager's own error near the sample's inputs."""

    def run(seed: int) -> tuple[list[Any], list[Any]] | None:
        if not case.dtype.is_floating_point or torch.float64 not in case.op.supported_dtypes(device):
            return None
        nudged = rounding_noise.nudge(copy.deepcopy((sample.input, tuple(sample.args), dict(sample.kwargs))), seed)
        runs = (copy.deepcopy(nudged), to_fp64(nudged))
        results = []
        for input_, args, kwargs in runs:
            result = case.op.op(input_, *args, **kwargs)
            if with_arguments:
                result = _with_arguments(result, (input_, args, kwargs), frozenset(_arguments(input_, args, kwargs)))
            results.append([leaf for _path, leaf in flatten_outputs(result)])
        return results[0], results[1]

    return run


_COMPILER_ERROR = re.compile(r"(?:internal compiler )?error: .*")


def _first_lines(exc: BaseException) -> str:
    """The exception's first lines and, for a C++ compile error, the compiler's own error lines (which come after
    the command line inductor ran): what went wrong, not only that it did."""
    text = str(exc).strip().splitlines()
    errors = [m.group(0).strip() for line in text if (m := _COMPILER_ERROR.search(line))][:2]
    head = " ".join(text[:2] if errors else text[:3])
    return (head + (" … " + " … ".join(errors) if errors else ""))[:600]
