"""Judging one model under one wrapper from its ranks' reports: ranks that failed, ranks that compiled differently
(each rank's counters and reasons side by side), and numerics.

Numerics, per rank, against a float64 single-process run of the same steps (``steps.py``):
- compiled distributed vs eager distributed: ``judging.differences_from_reference``, the suites' rule (per element,
  in ULPs: suites/precision.py), each element's rounding noise taken as the distance between the two correct float32
  steps there are (eager distributed and the single-process step, which sum in other orders);
- eager distributed vs the fp32 single-process step: the tolerance is derived the same way, from how far the fp32
  single-process step itself is from fp64: averaging gradients over ranks reorders float sums and may cost as much
  rounding again, not more. A wrapper that drops or doubles a rank's gradient is off by the gradient itself. (Per
  leaf RMSE, at most 2 x the single-process step's + 1e-5: a check of the eager wrappers, not of a compiler.)
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch

from suites.batch_statistics import Noise
from suites.capture import bounded
from suites.distributed.launch import RankReport
from suites.judging import differences_from_reference
from suites.module_runs import flatten_outputs

COUNTERS = ("graphs", "graph_breaks", "recompiles", "backend_graphs")
COUNTER_WORDS = {"graphs": "graphs dynamo captured", "graph_breaks": "graph breaks", "recompiles": "recompiles",
                 "backend_graphs": "graphs handed to inductor (DDPOptimizer's bucket pieces each count)"}
MAX_LINES = 12
# Addresses and object ids differ between two processes running the same code; line numbers and names do not.
_PROCESS_SPECIFIC = re.compile(r"0x[0-9a-fA-F]+|\b\d{6,}\b")
TOLERANCE_MULTIPLIER = 2.0  # eager distributed vs single process: RMSE from fp64 at most 2 x the fp32 step's + 1e-5
RMSE_FLOOR = 1e-5


def rank_failures(reports: list[RankReport], wrapper: str) -> tuple[list[str], str | None]:
    """(problems, skip reason): a rank without a result, or one that raised, is a problem naming every rank's
    state; a skip on every rank (this torch lacks FSDP2, say) is the test's skip."""
    results = [report.results.get(wrapper) for report in reports]
    statuses = [result["status"] if result else None for result in results]
    if all(status == "skipped" for status in statuses):
        return [], str(results[0]["message"]) if results[0] else "skipped"
    if all(status == "ran" for status in statuses):
        return [], None
    lines = []
    for report, result in zip(reports, results, strict=True):
        failed_before = [w for w, r in report.results.items() if r["status"] == "error"]
        if result is None and failed_before:
            lines.append(f"rank {report.rank} did not run it: it stopped after its {failed_before[0]} step failed")
        elif result is None:
            lines.append(f"rank {report.rank} left no result for {wrapper}: {report.describe()}")
        elif result["status"] != "ran":
            lines.append(f"rank {report.rank} {result['status']}: {result['message']}")
        else:
            lines.append(f"rank {report.rank} ran {wrapper} to the end")
    return [f"the ranks did not both finish the {wrapper} step:", *lines], None


def _reasons(result: dict[str, Any], key: str) -> list[str]:
    return [_PROCESS_SPECIFIC.sub("#", reason) for reason in result.get(key, [])]


def _listed(rank: int, what: str, reasons: list[str]) -> str:
    shown = "; ".join(bounded(reason) for reason in reasons) if reasons else "none"
    return f"rank {rank} {what} ({len(reasons)}): {shown}"


def cross_rank_mismatches(reports: list[RankReport], wrapper: str) -> list[str]:
    """Every counter the ranks disagree on, then both ranks' graph-break and recompile reasons: two ranks running
    the same program must compile the same graphs, or their collectives can pair up wrongly or deadlock."""
    compiled = [report.results[wrapper]["compiled"] for report in reports]
    lines = []
    for key in COUNTERS:
        values = [result["counters"][key] for result in compiled]
        if len(set(values)) > 1:
            lines.append(f"{COUNTER_WORDS[key]}: " + ", ".join(f"rank {r} {v}" for r, v in enumerate(values)))
    for key, what in (("graph_break_reasons", "graph breaks"), ("recompile_reasons", "recompiles")):
        reasons = [_reasons(result, key) for result in compiled]
        if any(Counter(other) != Counter(reasons[0]) for other in reasons[1:]):
            lines.append(f"{what} differ in their reasons")
    if not lines:
        return []
    for key, what in (("graph_break_reasons", "graph breaks"), ("recompile_reasons", "recompiles")):
        counts = [Counter(_reasons(result, key)) for result in compiled]
        for rank, count in enumerate(counts):
            others = Counter[str]()
            for other in counts[:rank] + counts[rank + 1:]:
                others |= other
            lines += [f"{what} only on rank {rank}: {bounded(reason)}" for reason in (count - others).elements()]
    details = [_listed(r, what, result[key]) for key, what in (("graph_break_reasons", "graph breaks"),
                                                                ("recompile_reasons", "recompiles"))
               if any(result[key] for result in compiled) for r, result in enumerate(compiled)]
    return ["the ranks compiled differently:", *lines, *details]


def compiled_nothing(reports: list[RankReport], wrapper: str) -> list[str]:
    """A compiled step that handed inductor no graph ran eagerly: its numbers would match eager's and prove nothing
    (dynamo gives up on a frame it cannot resume, and does not start one in torch.nn's own layers)."""
    return [f"rank {report.rank}: torch.compile handed inductor no graph, so the {wrapper} step ran eagerly"
            for report in reports if report.results[wrapper]["compiled"]["counters"]["backend_graphs"] == 0]


def shortened(lines: list[str], limit: int = MAX_LINES) -> list[str]:
    """At most ``limit`` lines, the rest counted: a check-run annotation that lists every leaf of every rank and
    step says less than its first lines."""
    return lines if len(lines) <= limit else [*lines[:limit], f"... and {len(lines) - limit} more"]


def _rmse(a: torch.Tensor, b: torch.Tensor) -> float:
    diff = (a.to(torch.float64) - b.to(torch.float64))[torch.isfinite(b)]
    return math.sqrt(diff.square().mean().item()) if diff.numel() else 0.0


def distributed_vs_single(distributed: Any, single: Any, reference64: Any, what: str) -> list[str]:
    """One line per leaf where the eager distributed step is further from the fp64 single-process step than the
    fp32 single-process step's own rounding allows (see the module docstring)."""
    problems = []
    leaves = zip(flatten_outputs(distributed, what), flatten_outputs(single, what), flatten_outputs(reference64, what),
                 strict=True)
    for (path, got), (_, fp32), (_, fp64) in leaves:
        if got.shape != fp64.shape:
            problems.append(f"{path}: shape {tuple(got.shape)} != the single-process step's {tuple(fp64.shape)}")
            continue
        error, allowed = _rmse(got, fp64), TOLERANCE_MULTIPLIER * _rmse(fp32, fp64) + RMSE_FLOOR
        if not error <= allowed:
            problems.append(f"{path}: RMSE {error:.3g} from the fp64 single-process step > {TOLERANCE_MULTIPLIER:g} x "
                            f"the fp32 single-process step's {_rmse(fp32, fp64):.3g} + {RMSE_FLOOR:g}")
    return problems


def _same_leaves(a: Any, b: Any) -> bool:
    return [path for path, _ in flatten_outputs(a)] == [path for path, _ in flatten_outputs(b)]


def _two_orders(eager: Any, single: Any, what: str) -> Noise:
    """Each element's distance between two correct float32 steps: a measured draw of its rounding noise."""
    per_leaf = {path: (a.detach().cpu().double() - b.detach().cpu().double()).abs().nan_to_num(nan=0.0, posinf=0.0)
                for (path, a), (_, b) in zip(flatten_outputs(eager, what), flatten_outputs(single, what), strict=False)
                if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape
                and a.is_floating_point() and b.is_floating_point()}
    return Noise(per_leaf, "the distance between the eager distributed and the single-process float32 steps")


def numeric_problems(reports: list[RankReport], wrapper: str, single32: Any, reference64: Any,
                     rerun: Callable[[], Any] | None = None) -> list[str]:
    problems = []
    for report in reports:
        result = report.results[wrapper]
        eager, compiled = ({k: result[run][k] for k in ("grads", "params")} for run in ("eager", "compiled"))
        if not _same_leaves(eager, reference64):
            problems.append(f"rank {report.rank}: the eager {wrapper} step has other parameters or gradients than "
                            f"the single-process step: {[p for p, _ in flatten_outputs(eager)]}")
            continue
        what = f"rank {report.rank}"
        problems += differences_from_reference(compiled, eager, reference64, what=what,
                                               noise=_two_orders(eager, single32, what), rerun=rerun)
        problems += distributed_vs_single(eager, single32, reference64, f"rank {report.rank} eager {wrapper}")
    return problems
