"""A red test on a declared model explains itself: a numerics bug names the tensor, its derived tolerance and the
fp64 errors and leaves minify.py; a crash in inductor's generated code names the line and leaves the module, which
crashes again on its own. The model is ResNet's last stage in miniature: a training-mode BatchNorm over a batch of
2 with a 1x1 feature map (two values per channel, the case that turned ResNet-18 red under the plain rule).
The other suites' declared targets explain themselves too: freezing (where torch's minifier cannot reproduce the
fold, the failure says why and no minify.py is left) and fusion (minify.py compiles the declared function)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from suites.naming import sanitise_nodeid

from .suite_run import SuiteRun, run_suite

TAIL = """\
import torch
from torch import nn


def examples():
    model = lambda: nn.Sequential(nn.Conv2d(3, 8, 3), nn.AdaptiveAvgPool2d(1), nn.BatchNorm2d(8),
                                  nn.ReLU(inplace=True), nn.Flatten(), nn.Linear(8, 4))
    return [("bn_tail", model, (torch.randn(2, 3, 8, 8),))]


def conv_bn():
    def model():
        block = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8))
        with torch.no_grad():  # statistics that do not fold to an identity
            block[1].running_mean.uniform_(-1, 1), block[1].running_var.uniform_(0.5, 2.0), block[1].weight.normal_()
        return block
    return [("conv_bn", model, (torch.randn(2, 3, 8, 8),))]


def cosines():
    return [("cosine_chain", lambda x: x.cos() * 2, (torch.randn(37, requires_grad=True),))]
"""
NODEID = "correctness/test_correctness.py::test_declared_model[bn_tail]"
NAME = "test_declared_model[bn_tail]"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "repo" / "tail").mkdir(parents=True)
    (tmp_path / "repo" / "tail" / "__init__.py").write_text("")
    (tmp_path / "repo" / "tail" / "models.py").write_text(TAIL)
    return tmp_path / "repo"


def _run(repo: Path, work: Path, plant: str | None, *, suite: str = "correctness",
         selection: str = "test_declared_model", targets: dict[str, list[str]] | None = None) -> tuple[SuiteRun, Path]:
    work.mkdir()
    env = {"COMPILE_CI_TARGETS": json.dumps(targets or {"models": ["tail.models:examples"]}),
           "COMPILE_CI_CHECKOUT": str(repo), "COMPILE_CI_OUTPUT_DIR": str(work / "out")}
    if plant:  # the plugin and a plant together: run_suite takes one -p, so load the plant through PYTEST_ADDOPTS
        env["PYTEST_ADDOPTS"] = f"-p tests.suites.planted.{plant}"
    run = run_suite(suite, selection, work, plugin="suites.plugin", extra_env=env)
    return run, work / "out" / "tests"


def test_the_clean_compiler_passes_batch_statistics_over_two_values(repo: Path, tmp_path: Path) -> None:
    run, tests = _run(repo, tmp_path / "work", None)
    artifacts = tests / sanitise_nodeid(NODEID)
    assert run.returncode == 0 and run.named("passed") == {NAME}, run.describe()
    assert not (artifacts / "minify.py").exists()


def test_a_batch_norm_bug_names_the_tensor_its_derived_tolerance_and_the_minifier(repo: Path, tmp_path: Path) -> None:
    run, tests = _run(repo, tmp_path / "work", "batch_norm_unbiased_variance")
    artifacts = tests / sanitise_nodeid(NODEID)
    assert run.returncode == 1 and run.named("failed") == {NAME}, run.describe()
    message = run.messages[NAME]
    # The failing tensor with its shape, the fp64 errors of both sides, the derived bound and how it was derived.
    assert "grad['0.weight'] (8, 3, 3, 3) float32: " in message and "elements differ" in message, message
    assert "ULPs from float64" in message and "rounding noise" in message and "RMSE vs float64" in message, message
    assert "normalises with batch statistics (2 (BatchNorm2d))" in message, message
    assert "minify.py beside this test's artifacts" in message and "TORCHDYNAMO_REPRO_LEVEL=4" in message, message
    script = (artifacts / "minify.py").read_text()
    compile(script, "minify.py", "exec")
    assert "'spec': 'tail.models:examples'" in script and "'name': 'bn_tail'" in script and "('dynamo', 4)" in script


def test_a_crash_in_generated_code_keeps_the_module_which_crashes_on_its_own(repo: Path, tmp_path: Path) -> None:
    run, tests = _run(repo, tmp_path / "work", "generated_code_unbound_local")
    artifacts = tests / sanitise_nodeid(NODEID)
    assert run.returncode == 1 and run.named("failed") == {NAME}, run.describe()
    message = run.messages[NAME]
    assert "crash in inductor's generated code: UnboundLocalError" in message, message
    assert "of the generated module, in call: del buf_planted" in message, message
    assert "crashed_graph.py beside this test's artifacts" in message and "TORCHDYNAMO_REPRO_LEVEL=2" in message
    # Standalone: the kept module runs itself on random inputs of the recorded shapes and hits the same line.
    alone = subprocess.run([sys.executable, str(artifacts / "crashed_graph.py")], capture_output=True, text=True,
                           timeout=300, cwd=tmp_path)
    assert alone.returncode != 0 and "UnboundLocalError" in alone.stderr, alone.stderr[-3000:]


def test_a_freezing_fold_bug_names_the_tensor_and_why_there_is_no_minifier(repo: Path, tmp_path: Path) -> None:
    # Every multiplier folded into a conv 25 % too large, on a declared conv+BatchNorm: the freezing suite's
    # declared-model test fails by the suites' rule, and says why torch's minifier cannot reproduce a freezing bug.
    name = "test_declared_model[conv_bn]"
    run, tests = _run(repo, tmp_path / "work", "conv_bn_wrong_scale", suite="freezing", selection=name,
                      targets={"models": ["tail.models:conv_bn"]})
    assert run.returncode == 1 and run.named("failed") == {name}, run.describe()
    message = run.messages[name]
    assert "output (2, 8, 6, 6) float32: " in message and "ULPs from float64" in message, message
    assert "tolerance: the suites' rule, per element" in message, message
    assert "minimised repro: no minify.py: torch's minifier cannot reproduce a freezing bug" in message, message
    artifacts = tests / sanitise_nodeid(f"freezing/test_freezing_constants.py::{name}")
    assert (artifacts / "repro.py").exists() and not (artifacts / "minify.py").exists(), sorted(tests.rglob("*"))


def test_a_fused_function_bug_leaves_a_minifier_that_compiles_the_function(repo: Path, tmp_path: Path) -> None:
    # Every cosine compiled as a sine: the fusion suite's declared function fails naming its output, and minify.py
    # rebuilds the function itself (not a model built from it) from the clone.
    name = "test_declared_fusion[cosine_chain]"
    run, tests = _run(repo, tmp_path / "work", "cos_to_sin_compiler", suite="fusion", selection=name,
                      targets={"fuse": ["tail.models:cosines"]})
    assert run.returncode == 1 and run.named("failed") == {name}, run.describe()
    message = run.messages[name]
    assert "output (37,) float32: " in message and "ULPs from float64" in message, message
    assert "tolerance: the suites' rule, per element" in message, message
    assert "minify.py beside this test's artifacts" in message and "TORCHDYNAMO_REPRO_LEVEL=4" in message, message
    script = (tests / sanitise_nodeid(f"fusion/test_fusion.py::{name}") / "minify.py").read_text()
    compile(script, "minify.py", "exec")
    assert "'spec': 'tail.models:cosines'" in script and "'name': 'cosine_chain'" in script, script
    assert "'call': 'function'" in script and "'backward': True" in script, script
