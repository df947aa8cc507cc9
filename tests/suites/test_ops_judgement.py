"""The ops suite's pure parts, in process: how one sample is judged, how the scope is sharded, which upstream
failures apply to which torch, and which bound a case is held to."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from suites import precision
from suites.ops import aim, comparison, known_failures

ROOT = Path(__file__).resolve().parents[2]

FLOAT32 = precision.Bound(2, 4)
BF16 = precision.Bound(2, 2)


def _sample(*tensors: torch.Tensor) -> SimpleNamespace:
    return SimpleNamespace(input=tensors[0], args=tensors[1:], kwargs={})


def _no_reference() -> None:
    return None


def test_a_wrong_value_at_one_point_names_the_point_and_its_inputs() -> None:
    x = torch.tensor([1.0, -0.0, 2.0, 0.0])
    eager = torch.reciprocal(x)
    compiled = eager.clone()
    compiled[1] = float("inf")  # the sign of -0.0 lost
    problem = comparison.difference(eager, compiled, lambda dtype: FLOAT32, _sample(x), _no_reference)
    assert problem is not None
    assert "1 of 4 elements differ" in problem and "at [1]: compiled inf, eager -inf" in problem, problem
    assert "inputs there: input = -0.0" in problem, problem


def test_nan_and_inf_positions_and_integers_are_exact() -> None:
    eager = torch.tensor([float("nan"), 1.0])
    assert comparison.difference(eager, eager.clone(), lambda dtype: FLOAT32, _sample(eager), _no_reference) is None
    assert comparison.difference(eager, torch.tensor([0.0, 1.0]), lambda dtype: FLOAT32, _sample(eager),
                                 _no_reference) is not None
    ints = torch.tensor([3, -4])
    assert comparison.difference(ints, ints + torch.tensor([0, 1]), lambda dtype: FLOAT32, _sample(ints),
                                 _no_reference) is not None
    shape = comparison.difference(ints, ints[:1], lambda dtype: FLOAT32, _sample(ints), _no_reference)
    assert shape == "shape: eager [2], compiled [1]"


def test_float64_arbitrates_where_compiled_is_the_more_accurate() -> None:
    # bf16 eager rounding an intermediate: compiled (rounded once) matches float64 where eager does not.
    exact = torch.tensor([1.0 + 2**-6], dtype=torch.float64)
    eager = torch.tensor([1.0 - 2**-5], dtype=torch.bfloat16)
    compiled = exact.to(torch.bfloat16)
    sample = _sample(eager)
    assert comparison.difference(eager, compiled, lambda dtype: BF16, sample, _no_reference) is not None
    assert comparison.difference(eager, compiled, lambda dtype: BF16, sample, lambda: [exact]) is None


def test_float64_does_not_excuse_a_result_that_depends_on_the_dtype() -> None:
    # nan_to_num(-inf) is the dtype's lowest value: float64's is far from float32's, and from a flipped sign alike.
    x = torch.tensor([float("-inf")])
    eager = torch.nan_to_num(x)
    problem = comparison.difference(eager, -eager, lambda dtype: FLOAT32, _sample(x),
                                    lambda: [torch.nan_to_num(x.double())])
    assert problem is not None and "input = -inf" in problem


def test_shards_partition_the_ops() -> None:
    names = [f"op{i}" for i in range(200)]
    owners = {name: [k for k in range(1, 5) if aim.Aim(True, shard=(k, 4)).in_shard(name)] for name in names}
    assert all(len(found) == 1 for found in owners.values())
    assert all(any(found == [k] for found in owners.values()) for k in range(1, 5))


@pytest.mark.parametrize("text", ["0/2", "3/2", "2", "a/b", "1/0"])
def test_a_malformed_shard_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="COMPILE_CI_OPS_SHARD"):
        aim.parse_shard(text)


def test_a_malformed_scope_is_refused() -> None:
    with pytest.raises(ValueError, match="COMPILE_CI_OPS_SCOPE"):
        aim.decide(aim.Baseline(), {"COMPILE_CI_OPS_SCOPE": "some"})


def test_known_failures_apply_to_their_torch_versions_and_samples_only() -> None:
    known = known_failures.Known("remainder", ("float32",), ("cpu",), ("2.13",), "why", samples=(16,))
    assert known.applies("remainder", "float32", "cpu", "2.13.0+cpu")
    assert not known.applies("remainder", "float32", "cpu", "2.14.0")
    assert not known.applies("remainder", "bfloat16", "cpu", "2.13.0")
    assert not known.applies("remainder", "float32", "cuda", "2.13.0")
    assert known.covers(16) and not known.covers(17)
    assert "samples 16" in known.describe() and "torch 2.13" in known.describe()


@functools.cache
def _op(name: str) -> object:
    from suites.ops import catalog

    return next(case for case in catalog.cases("cpu") if case.name == name and case.dtype == torch.float32)


def test_small_values_are_judged_in_their_own_precision() -> None:
    """Stock inductor's vectorised CPU expm1 is exp(x) - 1: 0 for 1e-8, within assert_close's atol = 1e-5 of eager's
    1e-8, and 1.1e7 ULPs from it. A 1e-6 constant is 8 ULPs at 1 and caught; at 1e4 it is below the last place."""
    x = torch.tensor([1e-8, 1e-4, 1.0])
    exact = lambda: [torch.expm1(x.double())]  # noqa: E731
    problem = comparison.difference(torch.expm1(x), torch.exp(x) - 1, lambda dtype: FLOAT32, _sample(x), exact)
    assert problem is not None and problem.startswith("2 of 3 elements differ"), problem
    assert "at [0]: compiled 0.0, eager 9.99999993922529e-09, float64 9.99999998922529e-09" in problem, problem
    assert "inputs there: input = 9.99999993922529e-09" in problem, problem
    offset = torch.tensor([1e-3, 1e4])
    shifted = comparison.difference(offset, offset + 1e-6, lambda dtype: FLOAT32, _sample(offset),
                                    lambda: [offset.double()])
    assert shifted is not None and "1 of 2 elements differ" in shifted and "at [0]" in shifted, shifted


@pytest.mark.filterwarnings("ignore")
def test_the_bound_is_the_devices_and_dtypes_not_an_opinfo_declaration() -> None:
    from suites.ops import tolerances

    # special.i1 declares atol=1e-4, rtol=0 for PyTorch's own test: an absolute tolerance hides every error below it.
    assert tolerances.for_case(_op("special.i1"), "cpu")(torch.float32) == precision.bound_for(torch.float32, "cpu")
    assert tolerances.for_case(_op("atan2"), "cuda")(torch.bfloat16) == precision.BOUNDS["cuda", torch.bfloat16]


@pytest.mark.filterwarnings("ignore")
def test_what_could_touch_any_op_aims_at_every_op(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch._inductor import config
    from torch._inductor.codegen.cpp import CppOverrides

    baseline = aim.Baseline.take()
    assert aim.decide(baseline, {}) == aim.Aim(False), "nothing changed yet"
    with config.patch(max_autotune=not config.max_autotune):
        switched = aim.decide(baseline, {})
    with config.patch(post_grad_custom_post_pass=lambda graph: None):
        with_pass = aim.decide(baseline, {})
    monkeypatch.setattr(CppOverrides, "sin", staticmethod(lambda x: f"std::cos({x})"))
    overridden = aim.decide(baseline, {})
    monkeypatch.undo()
    assert switched.everything and any("max_autotune" in reason for reason in switched.reasons), switched
    assert with_pass.everything and any("a pass can rewrite" in reason for reason in with_pass.reasons), with_pass
    assert overridden.everything and "codegen override CppOverrides.sin changed" in " ".join(overridden.reasons)
    assert switched.changed_everything and with_pass.changed_everything and overridden.changed_everything
    every_op = aim.decide(baseline, {"COMPILE_CI_OPS_SCOPE": "all"})
    assert every_op.everything and not every_op.changed_everything  # the scope asked: nothing was changed
    assert aim.decide(baseline, {}) == aim.Aim(False), "every change undone"


def test_on_a_sweep_of_every_op_only_a_changed_path_can_turn_red() -> None:
    """On the default branch every op runs; a case whose route meets nothing the repository changed runs stock
    torch's path, so its failure is upstream (an expected failure that says so), never the repository's red."""
    changed_reciprocal = aim.Aim(True, frozenset({"aten.reciprocal"}))
    assert changed_reciprocal.changed({"aten.reciprocal", "aten.mul"}, unknown=False)
    assert not changed_reciprocal.changed({"aten.sin"}, unknown=False)
    assert changed_reciprocal.changed({"aten.sin"}, unknown=True)  # a route not known: it may go anywhere
    assert aim.Aim(True, changed_everything=True).changed({"aten.sin"}, unknown=False)


def test_a_budget_that_ends_inside_an_import_waits_for_the_import(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The budget's alarm lands wherever the compile is, and a compile runs torch's lazy imports: raised inside one,
    it left the module half-run and out of sys.modules, so its next import ran it again and registered its backend
    twice ("duplicate name: dynamo_minifier_backend" on every later case of a CPU host's sweep). The alarm now waits
    for the import to end, then stops the batch."""
    import time

    from suites.ops import sweep

    (tmp_path / "slow_to_import.py").write_text("import time\ntime.sleep(0.5)\nCOMPLETE = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    started = time.monotonic()
    with pytest.raises(sweep._OverBudget):  # noqa: PT012 - the budget ends in the import, is raised after it
        with sweep._time_limit(0.05):
            import slow_to_import  # noqa: F401
            while time.monotonic() - started < 5:
                pass
    assert sys.modules["slow_to_import"].COMPLETE is True  # imported once, whole
    assert 0.5 <= time.monotonic() - started < 2
    # An import that does not end within the grace is cut, so a hanging import cannot outlast the budget.
    from suites import alarm

    monkeypatch.setattr(alarm, "GRACE_S", 0.2)
    (tmp_path / "hangs_on_import.py").write_text("import time\ntime.sleep(30)\n")
    started = time.monotonic()
    with pytest.raises(sweep._OverBudget), sweep._time_limit(0.05):
        import hangs_on_import  # noqa: F401
    assert time.monotonic() - started < 5 and "hangs_on_import" not in sys.modules


@pytest.mark.filterwarnings("ignore")
def test_a_batch_over_its_time_budget_stops_the_case_and_leaves_torch_usable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A compile that takes longer than a batch's budget (inductor's unrolled pooling windows took 12+ minutes on
    2 cores) is stopped and the case reported on the samples it left, instead of holding the job until its limit."""
    import signal

    from suites.ops import sweep

    case = _op("atan2")
    tolerance_of = functools.partial(lambda _dtype: precision.bound_for(_dtype, "cpu"))
    # Without a limit first, so that the limited run's time is the compile's own whatever ran before in this process:
    # the budget's alarm waits for an import in progress (suites/alarm.py, up to GRACE_S), and a process's first
    # compile imports inductor's modules as it goes and builds each kernel inside the import of its generated module.
    # A full run (three workers on two cores) once saw the first batch of a cold process end before the alarm could
    # be taken.
    monkeypatch.setenv(sweep.BATCH_SECONDS_ENV, "0")
    assert sweep.run_case(case, "cpu", tolerance_of).failures == ()
    sweep.internals.reset_dynamo()
    monkeypatch.setenv(sweep.BATCH_SECONDS_ENV, "0.01")
    handler = signal.getsignal(signal.SIGALRM)
    outer_delay = signal.getitimer(signal.ITIMER_REAL)[0]  # pytest-timeout's, where it runs with a signal
    stopped = sweep.run_case(case, "cpu", tolerance_of)
    assert stopped.judged > 0 and len(stopped.failures) == stopped.judged
    assert all(f.problem.startswith("not judged: a batch of ") and "more than 0.01 s to compile and run "
               "(COMPILE_CI_OPS_BATCH_SECONDS); the case stopped there" in f.problem for f in stopped.failures)
    assert signal.getsignal(signal.SIGALRM) == handler  # the outer timer is given back, with its handler
    assert (signal.getitimer(signal.ITIMER_REAL)[0] > 0) == (outer_delay > 0)
    monkeypatch.setenv(sweep.BATCH_SECONDS_ENV, "0")  # no limit: the same case compiles and passes afterwards
    assert sweep.run_case(case, "cpu", tolerance_of).failures == ()


@pytest.mark.filterwarnings("ignore")
def test_uninitialized_memory_is_judged_on_dtype_and_shape_only() -> None:
    """empty_like returns whatever the allocator held, in eager and compiled alike: comparing its values reported
    "upstream differences" on 16 of 31 samples of a sixteenth of the CPU sweep."""
    from suites.ops import sweep

    case = _op("empty_like")
    assert not case.values_matter and _op("zeros_like").values_matter
    assert sweep.run_case(case, "cpu", lambda _dtype: precision.bound_for(_dtype, "cpu")).failures == ()


SHARD_PLAN_PROBE = """
import json, sys
from suites.ops import aim, catalog, plan
planned = plan.plan("cpu")
assert not planned.problem, planned.problem
routed = {}
for path in __import__("pathlib").Path(sys.argv[1]).rglob("routes-*.json"):
    routed.update(json.loads(path.read_text()))
cases = catalog.cases("cpu")
print(json.dumps({"cases": len(cases), "other_shards": planned.other_shards, "run": [c.test_id for c in planned.run],
                  "routed": sorted(routed), "owned": sorted(c.test_id for c in cases if planned.aim.in_shard(c.name))}))
"""


def test_a_shard_routes_only_the_ops_it_owns(tmp_path: Path) -> None:
    # N shards on N workers: each traces its own sixteenth of the catalog, not the whole of it (on a cold CUDA host
    # routing everything took about 150 s per shard before any op ran).
    env = {**os.environ, "COMPILE_CI_OPS_SCOPE": "all", "COMPILE_CI_OPS_SHARD": "3/16", "COMPILE_CI_DEVICE": "cpu",
           "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", SHARD_PLAN_PROBE, str(tmp_path)], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["routed"] == seen["owned"] and seen["owned"], "a shard traced ops it does not own, or none"
    assert seen["other_shards"] == seen["cases"] - len(seen["owned"])
    assert set(seen["run"]) <= set(seen["owned"]) and seen["run"]


PATCH = '''
import torch
from torch._inductor import lowering

_stock = lowering.lowerings[torch.ops.aten.{op}.default]


def patched(*args, **kwargs):
    return _stock(*args, **kwargs)


lowering.lowerings[torch.ops.aten.{op}.default] = patched
'''


@pytest.mark.filterwarnings("ignore")
def test_a_pull_request_sweeps_the_patches_it_changed_not_every_patch(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A repository patches `sin` and `cos` in two files and sets a custom pass in a third: a pull request that
    changes only the `sin` file aims at `sin`'s ops, with the others named as not swept; one that changes the pass's
    file sweeps every op; without the service's list (a push, a base run) every patch counts, as before."""
    import importlib

    from torch._inductor import config, lowering

    (tmp_path / "patch_sin.py").write_text(PATCH.format(op="sin"))
    (tmp_path / "patch_cos.py").write_text(PATCH.format(op="cos"))
    (tmp_path / "passes.py").write_text("def custom_pass(graph):\n    return None\n")
    (tmp_path / "README.md").write_text("docs")
    baseline = aim.Baseline.take()
    stock = {op: lowering.lowerings[op] for op in (torch.ops.aten.sin.default, torch.ops.aten.cos.default)}
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        importlib.import_module("patch_sin"), importlib.import_module("patch_cos")
        custom_pass = importlib.import_module("passes").custom_pass
        with config.patch(post_grad_custom_post_pass=custom_pass):
            def aimed(changed: list[str] | None) -> aim.Aim:
                env = {"COMPILE_CI_CHECKOUT": str(tmp_path)}
                return aim.decide(baseline, env if changed is None else {**env, aim.CHANGED_ENV: json.dumps(changed)})

            sin_only, pass_file, docs_only, no_list = (aimed(["patch_sin.py"]), aimed(["passes.py"]),
                                                       aimed(["README.md"]), aimed(None))
    finally:
        lowering.lowerings.update(stock)
        for name in ("patch_sin", "patch_cos", "passes"):
            sys.modules.pop(name, None)
    assert not sin_only.everything and sin_only.families == {"aten.sin"}, sin_only
    not_swept = [r for r in sin_only.reasons if "not swept" in r]
    assert any("aten.cos" in r for r in not_swept) and any("post_grad_custom_post_pass" in r for r in not_swept)
    assert pass_file.everything and pass_file.families == frozenset(), pass_file
    assert not docs_only.everything and docs_only.families == frozenset(), docs_only
    assert no_list.everything and no_list.families == {"aten.sin", "aten.cos"}, no_list
