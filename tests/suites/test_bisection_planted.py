"""Every suite's planted bugs (tests/suites/planted) bisected to the stage and place they plant, in a job on CPU
(heavy: minutes each here; the default run's proofs of the same property are in test_bisection.py). On a GPU host,
COMPILE_CI_TEST_DEVICE=cuda runs them on CUDA.

Where the bisector has no subsystem for the place a plant changes (a function put in place of inductor's post-grad
passes, of a compiled graph's call, of AOT autograd's mutation handling, a freezing pattern's handler), the answer is
the stage, and the suspect pair names the change among the repository's. Plants whose tests judge no compiled result
against eager (strides, graph-level CSE checks, random-stream statistics, a crash in generated code) are not
bisected at all."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from suites import bisect_torch

from .bisect_run import DEVICE_ENV, PLANTED, bisect_suite, line_of

pytestmark = [pytest.mark.heavy,
              pytest.mark.skipif(bool(bisect_torch.unavailable()), reason=bisect_torch.unavailable() or "-")]
ARCHITECTURE = "correctness/test_breadth_models.py::test_architecture_matches_eager_forward_and_backward"
FRAGILE = "correctness/test_correctness_numerics.py::test_fragile_layer"


@pytest.mark.parametrize(("plant", "test", "selection", "op", "defined"), [
    ("special_points", "ops/test_ops.py::test_op_matches_eager[reciprocal-float32]",
     "float32 and reciprocal and not rdiv", "aten.reciprocal.default", "def reciprocal_of_unsigned_zero"),
    ("variance_by_cancellation", f"{FRAGILE}[layer_norm-offset]", "test_fragile_layer and layer_norm-offset",
     "aten.var_mean.correction", "def var_mean_one_pass"),
])
def test_a_planted_table_entry_is_named_with_its_op_and_line(tmp_path: Path, plant: str, test: str, selection: str,
                                                             op: str, defined: str) -> None:
    suite = test.split("/")[0]
    bisected = bisect_suite(suite, selection, tmp_path, plant, seconds=900, timeout=1800)
    found = bisected.result(test)
    assert found is not None and found["status"] == "found", bisected.describe()
    table = "lowering.lowerings" if suite == "ops" else "decomposition.decompositions"
    stage = ("inductor", "lowerings") if suite == "ops" else ("aot_eager_decomp_partition", "decomposition")
    assert (found["backend"], found["subsystem"]) == stage and op in found["names"], found
    assert found["place"] == f"torch._inductor.{table}[{op}]", found
    line = line_of(PLANTED / f"{plant}.py", defined)
    assert found["where"].endswith(f"tests/suites/planted/{plant}.py:{line}"), found


@pytest.mark.parametrize(("plant", "test", "selection", "place", "defined"), [
    ("flush_denormals", f"{FRAGILE}[rms_norm-tiny]", "test_fragile_layer and rms_norm-tiny",
     "torch._inductor.output_code.CompiledFxGraph.__call__", "flush_denormals.py:def call_with_denormals_flushed"),
    ("exclusive_cumsum", f"{ARCHITECTURE}[scans_and_bits]", "scans_and_bits",
     "torch._inductor.compile_fx.post_grad_passes", "breadth_graph_rewrite.py:def post_grad_passes_then_rewrite"),
    ("index_put_overwrites", f"{ARCHITECTURE}[graph_convolution]", "graph_convolution",
     "torch._inductor.compile_fx.post_grad_passes", "breadth_graph_rewrite.py:def post_grad_passes_then_rewrite"),
])
def test_a_planted_replacement_inside_inductor_is_inductors_and_the_repositorys(
        tmp_path: Path, plant: str, test: str, selection: str, place: str, defined: str) -> None:
    if plant == "flush_denormals" and os.environ.get(DEVICE_ENV) == "cuda":
        pytest.skip("the plant flushes the CPU's denormals only: CUDA results are untouched")
    bisected = bisect_suite("correctness", selection, tmp_path, plant, seconds=900, timeout=1800)
    found = bisected.result(test)
    assert found is not None and (found["status"], found["backend"], found["subsystem"]) == ("found", "inductor", ""), \
        bisected.describe()
    file, text = defined.split(":")
    assert found["suspect"]["verdict"] == "yours", found
    # The plant lives outside the job's checkout: its file is named as the host has it (relative or absolute).
    where = f"tests/suites/planted/{file}:{line_of(PLANTED / file, text)}"
    assert any(change["place"] == place and change["where"].endswith(where)
               for change in found["suspect"]["changes"]), found


def test_a_planted_freezing_fold_is_inductors(tmp_path: Path) -> None:
    # Freezing runs inside inductor, and no subsystem of the bisector's covers its folding patterns: the stage. The
    # plant wraps the handlers of entries torch registered in its folding pass: the fingerprint sees them, restored()
    # cannot undo them, so the pair names one (the plant's wrapper) and says stock torch was not tried.
    test = "freezing/test_freezing_folding.py::test_conv_bn_folded_matches_eager[module_bn]"
    bisected = bisect_suite("freezing", "test_conv_bn_folded_matches_eager and module_bn and not two", tmp_path,
                            "conv_bn_wrong_scale", seconds=900, timeout=1800)
    found = bisected.result(test)
    assert found is not None and (found["status"], found["backend"]) == ("found", "inductor"), bisected.describe()
    suspect = found["suspect"]
    assert suspect["verdict"] == "inseparable", found
    first = suspect["changes"][0]
    line = line_of(PLANTED / "conv_bn_wrong_scale.py", "def fold_with_wrong_scale")
    assert first["place"].startswith("torch._inductor.fx_passes.freezing_patterns.binary_folding_pass.patterns["), found
    assert first["where"].endswith(f"tests/suites/planted/conv_bn_wrong_scale.py:{line}"), found


def test_a_planted_batch_norm_decomposition_on_a_declared_model(tmp_path: Path) -> None:
    # The red_explained tail model (a training-mode BatchNorm over two values per channel) with Bessel's correction
    # planted in inductor's var_mean: the decomposition, and the plant's line.
    from .test_red_explained import NODEID, TAIL

    repo = tmp_path / "repo"
    (repo / "tail").mkdir(parents=True)
    (repo / "tail" / "__init__.py").write_text("")
    (repo / "tail" / "models.py").write_text(TAIL)
    env = {"COMPILE_CI_TARGETS": '{"models": ["tail.models:examples"]}', "COMPILE_CI_CHECKOUT": str(repo)}
    bisected = bisect_suite("correctness", "test_declared_model", tmp_path / "work", "batch_norm_unbiased_variance",
                            seconds=900, timeout=1800, extra_env=env)
    found = bisected.result(NODEID)
    assert found is not None and found["status"] == "found", bisected.describe()
    assert (found["backend"], found["subsystem"]) == ("aot_eager_decomp_partition", "decomposition"), found
    line = line_of(PLANTED / "batch_norm_unbiased_variance.py", "def var_mean_bessel")
    assert found["place"] == "torch._inductor.decomposition.decompositions[aten.var_mean.correction]", found
    assert found["where"].endswith(f"tests/suites/planted/batch_norm_unbiased_variance.py:{line}"), found


@pytest.mark.parametrize(("suite", "selection", "plant"), [
    ("layout", "keeps_eager_strides", "channels_last_outputs"),
    ("fusion", "cse", "cse_merges_random_ops"),
    ("correctness", "test_two_random_ops_in_one_graph_are_independent", "random_ops_share_seed"),
])
def test_a_plant_that_fails_no_compiled_judgement_is_not_bisected(tmp_path: Path, suite: str, selection: str,
                                                                  plant: str) -> None:
    bisected = bisect_suite(suite, selection, tmp_path, plant)
    assert bisected.run.named("failed"), bisected.describe()
    assert not list((bisected.out / "tests").glob("*/bisect.json")), bisected.describe()
