"""The layout suite catches compiled outputs that leak channels-last strides on CPU, and passes without them."""

from __future__ import annotations

from pathlib import Path

from .suite_run import run_suite

SELECTION = "keeps_eager_strides or test_graph_break_between_convs"
# Eager returns contiguous conv outputs here; the plant hands them back channels-last.
LEAKING = {
    "test_conv_output_keeps_eager_strides[default]",
    "test_graph_break_between_convs[two_convs]",
    "test_graph_break_between_convs[patch_depthwise_pointwise]",
}
# Eager itself returns channels-last for a channels-last input, so the leaked layout is the right one there.
UNAFFECTED = {"test_channels_last_input_keeps_eager_strides"}


def test_leaked_channels_last_outputs_fail_the_stride_tests(tmp_path: Path) -> None:
    run = run_suite("layout", SELECTION, tmp_path, plugin="tests.suites.planted.channels_last_outputs")
    failed = run.named("failed", "error")
    assert run.returncode == 1, run.describe()
    assert LEAKING <= failed, f"missed: {sorted(LEAKING - failed)}\n{run.describe()}"
    assert UNAFFECTED <= run.named("passed"), run.describe()
    for name in failed:
        assert "compiled output layout differs from eager" in run.messages[name], run.messages[name]


def test_without_the_plant_the_same_tests_pass(tmp_path: Path) -> None:
    run = run_suite("layout", SELECTION, tmp_path)
    assert run.returncode == 0, run.describe()
    assert LEAKING | UNAFFECTED <= run.named("passed"), run.describe()
