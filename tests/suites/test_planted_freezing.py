"""The freezing suite catches a conv+batchnorm fold with a wrong scale, and passes without it."""

from __future__ import annotations

from pathlib import Path

from .suite_run import run_suite

# The conv-bn cases whose batchnorm is folded into its conv (a conv feeding two batchnorms may stay unfolded), and
# a test with no conv at all, which must not notice the plant.
SELECTION = "test_conv_bn_folded_matches_eager or test_random_op_not_folded"
FOLDED_CASES = {f"test_conv_bn_folded_matches_eager[{case}]" for case in ("module_bn", "functional_bn")}
UNRELATED = {"test_random_op_not_folded"}


def test_wrong_fold_scale_fails_the_conv_bn_tests(tmp_path: Path) -> None:
    run = run_suite("freezing", SELECTION, tmp_path, plugin="tests.suites.planted.conv_bn_wrong_scale")
    failed = run.named("failed", "error")
    assert run.returncode == 1, run.describe()
    assert FOLDED_CASES <= failed, f"missed: {sorted(FOLDED_CASES - failed)}\n{run.describe()}"
    assert all(name.startswith("test_conv_bn_folded_matches_eager[") for name in failed), run.describe()
    assert UNRELATED <= run.named("passed"), run.describe()
    for name in FOLDED_CASES:
        # Caught by the numeric judgement against the fp64 reference, not by a crash the plant caused.
        assert "compiled result differs from eager beyond tolerance" in run.messages[name], run.messages[name]


def test_without_the_plant_the_same_tests_pass(tmp_path: Path) -> None:
    run = run_suite("freezing", SELECTION, tmp_path)
    assert run.returncode == 0, run.describe()
    assert FOLDED_CASES | UNRELATED <= run.named("passed"), run.describe()
