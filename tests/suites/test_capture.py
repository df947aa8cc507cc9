"""The artifacts capture records what inductor produced, and loses only a figure (never the test) on a torch that
lacks one of the private metrics it reads."""

from __future__ import annotations

import torch

from suites import harness


def _compile_and_run() -> harness.CompileCapture:
    harness.reset_dynamo()
    with harness.CompileCapture().active() as capture:
        torch.compile(lambda x: torch.sin(x) * 2)(torch.randn(8))
    return capture


def test_capture_records_code_and_metrics() -> None:
    capture = _compile_and_run()
    assert len(capture.codes) == 1 and "def call(" in capture.codes[0]
    assert capture.metrics["graphs"] == 1 and capture.metrics["compile_time_s"] > 0


def test_a_private_api_this_torch_lacks_is_no_figure_not_a_skip() -> None:
    # The metrics snapshot reads private figures through this lookup; a missing one must not skip the test.
    assert harness._optional("torch._dynamo.utils", "no_such_metric_in_any_torch") is None
    assert harness._optional("torch._no_such_module", "counters") is None
    assert harness._optional("torch._dynamo.utils", "counters") is not None
