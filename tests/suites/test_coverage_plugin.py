"""Op-family coverage (issue 20): the family naming and the denominator's exclusions, and the recording plugin in a
real suite run writing coverage.json with the families the selected tests compiled."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from suites import harness, op_families

from .suite_run import REPO, run_suite

aten = torch.ops.aten


@pytest.mark.parametrize(("target", "family"), [
    (aten.add.Tensor, "aten.add"), (aten.add_.Scalar, "aten.add"), (aten.add, "aten.add"),
    (aten.__and__.Tensor, "aten.__and__"), (aten._softmax.default, "aten._softmax"),
    (torch.ops.prims.convert_element_type.default, "prims.convert_element_type"), (len, None),
])
def test_overloads_and_in_place_forms_fold_into_one_family(target: object, family: str | None) -> None:
    assert op_families.family_of(target) == family


@pytest.mark.parametrize(("family", "cpu", "cuda"), [
    ("aten.cumsum", True, True), ("aten._foreach_add", False, False), ("prims.iota", False, False),
    ("aten._flash_attention_forward", False, True), ("aten._scaled_dot_product_flash_attention_for_cpu", True, False),
    ("aten._int_mm", False, False), ("aten.sparse_coo_tensor", False, False), ("aten.sym_size", False, False),
])
def test_denominator_excludes_what_cannot_apply_on_the_device(family: str, cpu: bool, cuda: bool) -> None:
    assert (op_families.exclusion_reason(family, "cpu") is None) is cpu
    assert (op_families.exclusion_reason(family, "cuda") is None) is cuda


def test_dispatcher_decomposed_families_leave_the_denominator() -> None:
    lowering_keys, decomposition_keys = harness.inductor_op_tables()
    implicit = op_families.implicit_families(lowering_keys + decomposition_keys)
    counted, excluded = op_families.denominator(set(op_families.universe(lowering_keys, decomposition_keys)), "cpu",
                                                implicit)
    assert "aten.absolute" in implicit and "aten.absolute" not in counted  # abs under another name
    assert {"aten.cumsum", "aten.bitwise_xor", "aten.index_put", "aten.topk"} <= counted
    assert op_families.IMPLICIT_REASON in excluded


def test_plugin_records_the_families_a_run_compiled(tmp_path: Path) -> None:
    output = tmp_path / "out"
    # An empty compile cache: a graph served whole from the cache is not lowered again, so it would not be seen.
    run = run_suite("correctness", "scans_and_bits", tmp_path, plugin="suites.coverage", timeout=900,
                    extra_env={"COMPILE_CI_OUTPUT_DIR": str(output), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "c")})
    assert run.returncode == 0, run.describe()
    report = json.loads((output / "coverage.json").read_text())
    assert report["cache_hits"] == 0
    assert report["recording"] == {"lowered": True, "decomposed": True}
    assert {"aten.cumsum", "aten.cumprod", "aten.logcumsumexp", "aten.bitwise_xor", "aten.bucketize"} <= set(
        report["covered"])
    assert "aten.convolution" in report["uncovered"]  # nothing in this selection convolves
    [test] = report["per_test"]
    assert test.endswith("test_architecture_matches_eager_forward_and_backward[scans_and_bits]")
    assert report["percent"] == round(100 * len(report["covered"]) / report["denominator"], 1)


RECORD_THEN_PATCH = """
import torch
from torch._inductor import decomposition
from suites import harness

assert harness.record_decompositions(lambda op: None)
def softmax(x, dim, half_to_float):  # a repository's decomposition, installed after coverage began recording
    return x
decomposition.decompositions[torch.ops.aten._softmax.default] = softmax
print(decomposition.select_decomp_table()[torch.ops.aten._softmax.default] is softmax)
"""


def test_recording_decompositions_leaves_a_later_patch_in_inductors_table(tmp_path: Path) -> None:
    # Inductor copies its decomposition table at its first compile (without fallback_random). The coverage plugin
    # starts recording in its pytest_configure, before the repository's plugins may install a decomposition: had it
    # made that copy then, the repository's decomposition would never be compiled and its bug never seen.
    done = subprocess.run([sys.executable, "-c", RECORD_THEN_PATCH], capture_output=True, text=True, cwd=tmp_path,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert done.stdout.strip() == "True", done.stdout + done.stderr[-2000:]
