"""Every OpInfo op inductor compiles, at its reference inputs' special points: compiled against eager, per sample.

One test per (op, dtype): ``test_op_matches_eager[atan2-float32]``. A failure names each differing sample, the
element, eager's, the compiled and float64's value there, and the inputs at that point (see ``comparison.py``).
"""

from __future__ import annotations

import pytest
import torch

from .. import targets
from . import catalog, known_failures, plan, sweep, tolerances

_SHOWN = 8  # failing samples spelled out per test; the count says how many more


def test_sweep_is_planned(sweep_plan: plan.Plan, record_property: pytest.RecordProperty) -> None:
    """The plan itself: what changed, how many cases run, and the known upstream failures for this torch."""
    if sweep_plan.problem:
        if "is_available() is False" in sweep_plan.problem:
            pytest.skip(sweep_plan.problem)
        pytest.fail(f"the ops sweep could not be planned: {sweep_plan.problem}", pytrace=False)
    aim = sweep_plan.aim
    assert aim is not None
    record_property("scope", "every op" if aim.everything else "aimed")
    record_property("shard", f"{aim.shard[0]}/{aim.shard[1]}")
    record_property("changes", "\n".join(aim.reasons))
    record_property("cases_run", len(sweep_plan.run))
    record_property("cases_not_touched", sweep_plan.not_aimed)
    record_property("cases_in_other_shards", sweep_plan.other_shards)
    for reason, cases in sweep_plan.not_compiled.items():
        record_property(f"not_compiled: {reason}", " ".join(cases))
    record_property("known_failures", "\n".join(k.describe() for k in known_failures.listed(sweep_plan.device)))
    record_property("plan_seconds", sweep_plan.seconds)


def test_compiler_target_installs(compiler_target: targets.DeclaredCallable | targets.TargetError) -> None:
    """Each ``[targets] compiler`` callable ran: a broken one fails here instead of sweeping stock torch."""
    if isinstance(compiler_target, targets.TargetError):
        compiler_target.fail()


def test_op_matches_eager(case: catalog.OpCase, device: str, sweep_plan: plan.Plan,
                          record_property: pytest.RecordProperty) -> None:
    bound_of = tolerances.for_case(case, device)
    dtype = catalog.DTYPE_NAMES[case.dtype]
    listed = known_failures.for_case(case.name, dtype, device)
    try:
        run = sweep.run_case(case, device, bound_of)
    except sweep.DeviceLost as lost:
        every = [k for k in listed if not k.samples]
        if every:
            pytest.xfail(f"known upstream failure ({lost}): " + "; ".join(k.reason for k in every))
        if case.test_id in sweep_plan.stock_path:
            pytest.xfail(f"upstream: {case.name} traps on stock torch {torch.__version__}'s path (the repository "
                         f"changes nothing it goes through): {lost}")
        pytest.fail(f"{case.name} compiled with inductor: {lost}", pytrace=False)
    record_property("samples", run.samples)
    record_property("samples_judged", run.judged)
    record_property("graphs", run.graphs)
    if case.dtype.is_floating_point:
        record_property("tolerance", tolerances.describe(bound_of, case.dtype))
    expected = [f for f in run.failures if any(k.covers(f.index) for k in listed)]
    unexpected = [f for f in run.failures if f not in expected]
    record_property("failed_samples", " ".join(str(f.index) for f in run.failures))
    if run.judged == 0:
        pytest.skip(f"eager rejects every one of its {run.samples} inputs for {dtype} on {device}")
    if unexpected and case.test_id in sweep_plan.stock_path:
        record_property("upstream_samples", " ".join(str(f.index) for f in unexpected))
        lines = [f"sample {f.index} ({f.sample}): {f.problem}" for f in unexpected[:_SHOWN]]
        pytest.xfail(f"upstream: {case.name} differs from eager on {len(unexpected)} of {run.judged} samples on stock "
                     f"torch {torch.__version__}'s path (the repository changes nothing it goes through):\n"
                     + "\n".join(lines))
    if unexpected:
        lines = [f"sample {f.index} ({f.sample}): {f.problem}" for f in unexpected[:_SHOWN]]
        more = f"\n… and {len(unexpected) - _SHOWN} more" if len(unexpected) > _SHOWN else ""
        pytest.fail(f"{case.name} compiled with inductor differs from eager on {len(unexpected)} of {run.judged} "
                    f"samples ({dtype}, {device}, torch {torch.__version__}):\n" + "\n".join(lines) + more,
                    pytrace=False)
    if expected:
        pytest.xfail(f"known upstream failure on samples {', '.join(str(f.index) for f in expected)}: "
                     + "; ".join(k.reason for k in listed))
