"""The artifacts capture: what inductor produced and why dynamo broke or recompiled a graph, per test, for the
built-in suites and a repository's own tests alike; bounded, and never the reason a test is skipped."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from suites import capture, harness
from suites.job_files import BackgroundFiles

from .repo_run import RepoRun, run_repo_tests

LEDGER_TESTS = '''import unittest

import torch


def noisy(x):
    y = torch.sin(x)
    print("a graph break")
    return torch.cos(y)


def scaled(x, n):
    return x * n


def test_graph_break_and_recompile():
    torch.compile(noisy)(torch.randn(8))
    compiled = torch.compile(scaled)
    compiled(torch.randn(8), 2)
    compiled(torch.randn(8), 3)


class TestLikePyTorch(unittest.TestCase):  # as torch._dynamo.test_case.TestCase does
    def setUp(self):
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()

    def tearDown(self):
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()

    def test_compiles(self):
        torch.compile(lambda x: torch.tanh(x) + 1)(torch.randn(8))


def test_many_long_breaks():
    for _ in range(60):
        torch._dynamo.reset()  # as PyTorch's helpers do between models: the events must survive it

        def chatty(x):
            x = x + 1
            torch._dynamo.graph_break(msg="why " * 400)
            return x * 2

        torch.compile(chatty, backend="eager")(torch.randn(2))


def test_counters_cleared_mid_test():
    torch.compile(lambda x: x - 1, backend="eager")(torch.randn(2))
    torch._dynamo.utils.counters.clear()
    torch.compile(lambda x: x + 1, backend="eager")(torch.randn(2))
'''


@pytest.fixture(scope="module")
def ledger_run(tmp_path_factory: pytest.TempPathFactory) -> RepoRun:
    root = tmp_path_factory.mktemp("ledger")
    (root / "checkout" / "tests").mkdir(parents=True)
    (root / "checkout" / "tests" / "test_ledger.py").write_text(LEDGER_TESTS)
    run = run_repo_tests(root / "checkout", root / "work")
    assert run.returncode == 0, run.describe()
    return run


def _compile_and_run() -> capture.CompileCapture:
    harness.reset_dynamo()
    with capture.CompileCapture().active() as captured:
        torch.compile(lambda x: torch.sin(x) * 2)(torch.randn(8))
    return captured


def test_capture_records_code_and_metrics() -> None:
    captured = _compile_and_run()
    assert len(captured.codes) == 1 and "def call(" in captured.codes[0]
    assert captured.metrics["graphs"] == 1 and captured.metrics["compile_time_s"] > 0
    assert captured.code_bytes == len(captured.codes[0].encode())


def test_compile_time_is_every_compile_of_the_test_across_dynamo_resets() -> None:
    harness.reset_dynamo()
    torch.compile(lambda x: x * 3, backend="eager")(torch.randn(8))  # an earlier test's, still in dynamo's lists
    times = harness._optional("torch._dynamo.utils", "compilation_time_metrics")
    spent = []  # (compile, backend) seconds of each compile, read before the reset that drops them
    with capture.CompileCapture().active() as captured:
        for backend in ("inductor", "eager"):
            harness.reset_dynamo()  # as the suites do first: it drops dynamo's lists
            torch.compile(lambda x: torch.sin(x) - 1, backend=backend)(torch.randn(8))
            spent.append((sum(times["_compile.compile_inner"]), sum(times["OutputGraph.call_user_compiler"])))
    assert captured.metrics["compile_time_s"] == pytest.approx(sum(c for c, _ in spent), abs=2e-4)
    assert captured.metrics["dynamo_time_s"] == pytest.approx(sum(c - b for c, b in spent), abs=2e-4)
    assert 0 < captured.metrics["dynamo_time_s"] < captured.metrics["compile_time_s"]


def test_a_test_that_patches_inductors_code_callback_still_leaves_its_code() -> None:
    # inductor's own run_and_get_code replaces GraphLowering.save_output_code while it runs.
    harness.reset_dynamo()
    with capture.CompileCapture().active() as captured:
        _, codes = harness.run_and_get_code(torch.compile(lambda x: torch.cos(x) + 1), torch.randn(8))
    assert len(codes) == 1 and captured.codes == codes


def test_a_failed_artifact_write_loses_the_file_not_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = BackgroundFiles()
    files.write(tmp_path / "no such folder" / "metrics.json", "{}")
    files.write(tmp_path / "kept.json", "{}")
    files.close()
    assert (tmp_path / "kept.json").read_text() == "{}"
    assert "compile-ci: an artifact file could not be written" in capsys.readouterr().err


def test_a_private_api_this_torch_lacks_is_no_figure_not_a_skip() -> None:
    # The metrics snapshot reads private figures through this lookup; a missing one must not skip the test.
    assert harness._optional("torch._dynamo.utils", "no_such_metric_in_any_torch") is None
    assert harness._optional("torch._no_such_module", "counters") is None
    assert harness._optional("torch._dynamo.utils", "counters") is not None


def test_ledger_fields_name_the_graph_break_and_the_recompile_of_each_test(ledger_run: RepoRun) -> None:
    run = ledger_run
    ledger = run.metrics("tests/test_ledger.py::test_graph_break_and_recompile")
    line = LEDGER_TESTS.splitlines().index('    print("a graph break")') + 1
    assert len(ledger["graph_break_reasons"]) == 1, ledger
    reason = ledger["graph_break_reasons"][0]
    assert "print" in reason and reason.endswith(f"(tests/test_ledger.py:{line})"), reason
    assert ledger["recompile_reasons"] == ["n == 2 # return x * n # " + ledger["recompile_reasons"][0].split(" # ")[-1]]
    assert ledger["recompile_reasons"][0].split(" # ")[-1].endswith("test_ledger.py:13 in scaled"), ledger
    assert ledger["graph_breaks"] == 1 and ledger["recompiles"] == 1 and ledger["graphs"] == 4, ledger
    files = sorted(run.test_dir("tests/test_ledger.py::test_graph_break_and_recompile").glob("output_code_*.py"))
    assert len(files) == ledger["output_code_files"] == 4
    assert ledger["code_bytes"] == sum(f.stat().st_size for f in files) > 0
    assert ledger["reruns"] == [] and ledger["outcome"] == "passed" and ledger["frames"] >= 3

    # PyTorch's own TestCase clears dynamo's counters in setUp and tearDown: the figures are still this test's.
    pytorch_style = run.metrics("tests/test_ledger.py::TestLikePyTorch::test_compiles")
    assert pytorch_style["graphs"] == 1 and pytorch_style["frames"] == 1, pytorch_style
    assert pytorch_style["output_code_files"] == 1 and pytorch_style["graph_break_reasons"] == []


def test_ledger_lists_and_reasons_are_bounded(ledger_run: RepoRun) -> None:
    many = ledger_run.metrics("tests/test_ledger.py::test_many_long_breaks")
    assert len(many["graph_break_reasons"]) == capture.MAX_REASONS, many
    assert all(len(r) <= capture.MAX_REASON_CHARS for r in many["graph_break_reasons"])
    assert "why why" in many["graph_break_reasons"][0]
    # The list stops at MAX_REASONS; the counter still counts every break (a reset does not clear it).
    assert many["graph_breaks"] == 60 and many["graphs"] == 120, many


def test_a_counter_cleared_mid_test_counts_from_the_clear(ledger_run: RepoRun) -> None:
    assert ledger_run.metrics("tests/test_ledger.py::test_counters_cleared_mid_test")["graphs"] == 1


def test_reason_texts_are_one_bounded_line_without_run_specific_ids() -> None:
    assert capture.describe_recompile("12/3: L['n'] == 2\nUser stack trace:\n  File x") == "L['n'] == 2"
    assert capture.describe_recompile("x" * 5000) == "x" * (capture.MAX_REASON_CHARS - 1) + "…"
    frame = SimpleNamespace(filename="/job/checkout/pkg/model.py", lineno=7)
    inner = SimpleNamespace(filename="/opt/venv/torch/nn/modules/module.py", lineno=1)
    reason = SimpleNamespace(reason="Unsupported call\n  Explanation: it cannot\n  Hint: do not",
                             user_stack=[frame, inner])
    assert capture.describe_graph_break(reason, "/job/checkout") == "Unsupported call — it cannot (pkg/model.py:7)"
    assert capture.describe_graph_break(SimpleNamespace(reason="x\ty", user_stack=[]), "") == "x y"
