"""Layout optimization: inductor runs convolutions channels-last internally, yet callers must see eager's layout.

Inductor decides per graph whether to switch convolutions to channels-last (always on CPU with oneDNN; on CUDA by
a flops heuristic). The tests force the switch so that tiny shapes take the channels-last path on every device,
then check what a caller can observe: output strides (``view`` must keep working), values against a float64
reference, graph breaks between convolutions, training gradients, and mutation of a conv output's view or base.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch import nn

from .. import explain, harness, judging, module_runs, targets

LAYOUT_CONFIG = {"layout_optimization": True, "force_layout_optimization": True}


@pytest.fixture(autouse=True)
def layout_optimization_forced() -> Iterator[None]:
    with harness.inductor_config(**LAYOUT_CONFIG):
        yield


def significant_strides(t: torch.Tensor) -> tuple[tuple[int, int], ...]:
    """(size, stride) of every dimension longer than 1: a size-1 dimension's stride never changes which element
    an index reaches, so eager and compiled may legitimately disagree on it."""
    return tuple((size, stride) for size, stride in zip(t.shape, t.stride(), strict=True) if size > 1)


def assert_eager_strides(compiled: Any, eager: Any, what: str = "output") -> None:
    """Every tensor the compiled code returns has the strides eager returned for it."""
    pairs = zip(module_runs.flatten_outputs(compiled, what), module_runs.flatten_outputs(eager, what), strict=True)
    problems = [
        f"{path}: compiled strides {tuple(got.stride())} != eager {tuple(want.stride())} for shape {tuple(want.shape)}"
        for (path, got), (_, want) in pairs
        if isinstance(want, torch.Tensor) and want.numel() and significant_strides(got) != significant_strides(want)
    ]
    assert not problems, "compiled output layout differs from eager:\n  " + "\n  ".join(problems)


def channels_last_stride(shape: tuple[int, ...]) -> tuple[int, ...]:
    return torch.empty(shape, device="meta").to(memory_format=torch.channels_last).stride()


def assert_channels_last_conv(codes: list[str], conv_output_shape: tuple[int, ...]) -> None:
    # Inductor asserts the size and stride of every extern kernel's result; a channels-last stride for the conv's
    # output shape proves the layout optimization ran, so the stride checks around it are not vacuous.
    stride = str(channels_last_stride(conv_output_shape))
    assert any(stride in code for code in codes), (
        f"no channels-last buffer {conv_output_shape} with strides {stride} in the generated code: "
        "layout optimization did not switch the convolution"
    )


class TwoConvs(nn.Module):
    # 16 output channels against 3 input channels and odd spatial sizes (12 -> 5 -> 2) make channels-last strides
    # differ from contiguous ones in every dimension; no bias, as in typical conv+norm stacks.
    def __init__(self, graph_break: bool = False) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, kernel_size=3, stride=2, bias=False)
        self.conv2 = nn.Conv2d(16, 16, kernel_size=3, stride=2, bias=False)
        self.graph_break = harness.graph_break_function() if graph_break else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv1(x)
        if self.graph_break is not None:
            self.graph_break()
        return self.conv2(x)


class PatchDepthwisePointwise(nn.Module):
    """Patchify, depthwise ('same' padding, grouped) and pointwise convs, broken before the pointwise one."""

    def __init__(self) -> None:
        super().__init__()
        self.patchify = nn.Conv2d(3, 16, kernel_size=3, stride=3, bias=False)
        self.depthwise = nn.Conv2d(16, 16, kernel_size=3, groups=16, padding="same", bias=False)
        self.pointwise = nn.Conv2d(16, 16, kernel_size=1, bias=False)
        self.graph_break = harness.graph_break_function()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.depthwise(self.patchify(x))
        self.graph_break()
        return self.pointwise(x)


IMAGE_SHAPE = (2, 3, 12, 12)


def _eager_compiled_reference(
    module: nn.Module, inputs: tuple[Any, ...], compiled_fn: Callable[..., Any] | None = None
) -> tuple[Any, Any, Any]:
    """Compiled and eager outputs of ``module`` and the float64 run (a callable: judging runs it again for the rounding
    noise where needed); the float64 copy is taken before any call."""
    reference = copy.deepcopy(module).to(torch.float64)
    eager = module(*module_runs.clone_inputs(inputs))
    # An OptimizedModule proxies len(), so `compiled_fn or ...` would call a module's __len__.
    compiled_fn = torch.compile(module, backend="inductor") if compiled_fn is None else compiled_fn
    compiled = compiled_fn(*module_runs.clone_inputs(inputs))

    def fp64() -> Any:
        with torch.no_grad():
            return reference(*module_runs.to_fp64(inputs))

    return compiled, eager, fp64


@pytest.mark.parametrize("freezing", [False, True], ids=["default", "freezing"])
def test_conv_output_keeps_eager_strides(freezing: bool, device: str) -> None:
    # 3 -> 16 channels on 5x5 images with padding 1: the conv output (2, 16, 5, 5) is contiguous in eager, channels-
    # last inside the compiled graph, and must be handed back contiguous (freezing converts weights too).
    conv = nn.Conv2d(3, 16, kernel_size=3, padding=1, bias=False).to(device).eval()
    x = torch.randn(2, 3, 5, 5, device=device)
    with torch.no_grad(), harness.inductor_config(freezing=freezing):
        reference = copy.deepcopy(conv).to(torch.float64)
        eager = conv(x)
        compiled, codes = harness.run_and_get_code(torch.compile(conv, backend="inductor"), x)

    def fp64() -> torch.Tensor:
        with torch.no_grad():
            return reference(x.double())

    assert_channels_last_conv(codes, (2, 16, 5, 5))
    assert_eager_strides(compiled, eager)
    compiled.view(2, -1)  # raises on a channels-last result, as it would for a user flattening the output
    judging.assert_close_to_reference(compiled, eager, fp64)


def test_channels_last_input_keeps_eager_strides(device: str) -> None:
    # The converse: eager returns channels-last for a channels-last input, and compiled must not make it contiguous.
    model = TwoConvs().to(device).eval()
    x = torch.randn(IMAGE_SHAPE, device=device).to(memory_format=torch.channels_last)
    with torch.no_grad():
        compiled, eager, fp64 = _eager_compiled_reference(model, (x,))
    assert eager.is_contiguous(memory_format=torch.channels_last), "eager output is expected channels-last here"
    assert_eager_strides(compiled, eager)
    judging.assert_close_to_reference(compiled, eager, fp64)


GRAPH_BREAK_MODELS: dict[str, Callable[[], nn.Module]] = {
    "two_convs": lambda: TwoConvs(graph_break=True),
    "patch_depthwise_pointwise": PatchDepthwisePointwise,
}


@pytest.mark.parametrize("name", list(GRAPH_BREAK_MODELS))
def test_graph_break_between_convs(name: str, device: str) -> None:
    # The first graph's conv output crosses into eager code and into the second graph: it must cross with eager's
    # layout, or the second graph's input guards and the values it reads are wrong.
    model = GRAPH_BREAK_MODELS[name]().to(device).eval()
    counter = harness.compile_counter("inductor")
    with torch.no_grad():
        compiled, eager, fp64 = _eager_compiled_reference(
            model, (torch.randn(IMAGE_SHAPE, device=device),), torch.compile(model, backend=counter)
        )
    assert counter.frame_count == 2, f"expected one graph on each side of the break, got {counter.frame_count}"
    assert_eager_strides(compiled, eager)
    judging.assert_close_to_reference(compiled, eager, fp64)


def _judge_training(model: nn.Module, inputs: tuple[Any, ...]) -> None:
    rerun = module_runs.fp64_step(model, inputs, backward=True)
    eager = module_runs.forward_and_grads(model, model, inputs, backward=True)
    compiled = module_runs.forward_and_grads(torch.compile(model, backend="inductor"), model, inputs, backward=True)
    fp64 = rerun()

    problems = judging.differences_from_reference(compiled.outputs, eager.outputs, fp64.outputs, what="output",
                                                  rerun=lambda: rerun().outputs)
    problems += judging.differences_from_reference(compiled.grads, eager.grads, fp64.grads, what="grad",
                                                   rerun=lambda: rerun().grads)
    judging.fail_on_differences(problems)
    assert compiled.grads.keys() == eager.grads.keys(), "some parameters got no gradient"
    assert_eager_strides(compiled.outputs, eager.outputs)


def test_training_accuracy(device: str) -> None:
    # The backward graph computes weight gradients from channels-last activations; they must match eager's.
    _judge_training(TwoConvs().to(device).train(), (torch.randn(IMAGE_SHAPE, device=device),))


class ConvThenCrossEntropy(nn.Module):
    """A conv whose (channels-last) output is reshaped into a sequence and fed to cross entropy, as in the
    speech model of pytorch/pytorch#120759: nll_loss2d's backward once mishandled the changed layout."""

    def __init__(self, features: int, classes: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, classes, kernel_size=3, padding="same")
        self.out = nn.Linear(features * classes, classes)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        batch, channels, steps, features = x.size()
        logits = self.out(x.reshape(batch, steps, channels * features))
        return nn.functional.cross_entropy(logits.reshape(batch, logits.size(2), steps), labels)


def test_loss_backward_under_changed_layout(device: str) -> None:
    # 3 sequences of 6 steps x 5 features, 7 classes: every dimension distinct so a transposed reshape shows.
    model = ConvThenCrossEntropy(features=5, classes=7).to(device).train()
    x = torch.randn(3, 1, 6, 5, device=device)
    labels = torch.randint(0, 7, (3, 6), device=device)
    _judge_training(model, (x, labels))


class MutatesConvOutput(nn.Module):
    # Flattening a conv output with view() is only valid on eager's contiguous layout; mutating one side of the
    # view must show on the other even though the compiled conv produced channels-last.
    def __init__(self, mutate: str) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 16, kernel_size=3, stride=2, bias=False)
        self.mutate = mutate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        flat = x.view(-1)
        if self.mutate == "base":
            x.mul_(2)
            return flat
        flat.mul_(2)
        return x


@pytest.mark.parametrize("mutate", ["base", "view"])
def test_mutating_conv_output(mutate: str, device: str) -> None:
    model = MutatesConvOutput(mutate).to(device).eval()
    with torch.no_grad():
        compiled, eager, fp64 = _eager_compiled_reference(model, (torch.randn(IMAGE_SHAPE, device=device),))
    assert_eager_strides(compiled, eager)
    judging.assert_close_to_reference(compiled, eager, fp64)


def test_declared_model(
    declared_model: targets.DeclaredModel | targets.TargetError, device: str, request: pytest.FixtureRequest
) -> None:
    # Inference (eval, no grad) on the example inputs as given, then again with every 4-D input channels-last: in
    # both cases every output must come back with eager's strides and eager's accuracy. A numeric red explains
    # itself (suites/explain.py), its minify.py under the same layout settings and inputs.
    if isinstance(declared_model, targets.TargetError):
        declared_model.fail()
    model = declared_model.factory().to(device).eval()
    inputs = module_runs.map_tensors(declared_model.example_inputs, lambda t: t.to(device))
    variants = {"as_given": inputs}
    if any(isinstance(t, torch.Tensor) and t.dim() == 4 for t in inputs):
        variants["channels_last"] = module_runs.map_tensors(
            inputs, lambda t: t.to(memory_format=torch.channels_last) if t.dim() == 4 else t
        )
    reference = copy.deepcopy(model).to(torch.float64)
    compiled_model = torch.compile(model, backend="inductor")
    subject = explain.Subject(
        request.node.nodeid, declared_model, device, eval=True, config=tuple(LAYOUT_CONFIG.items())
    )
    explain.forget(subject.nodeid)

    def run(call: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        torch.manual_seed(0)
        return call(*module_runs.clone_inputs(args))

    with torch.no_grad(), harness.inductor_config(fallback_random=True):
        for variant, args in variants.items():
            step = dataclasses.replace(subject, channels_last=variant == "channels_last")
            eager = run(model, args)
            with explain.crash_in_generated_code(step, backward=False):
                compiled = run(compiled_model, args)
            fp64 = run(reference, module_runs.to_fp64(args))
            explain.judge_outputs(compiled, eager, fp64, subject=step, what=variant,
                                  rerun=lambda args=args: run(reference, module_runs.to_fp64(args)))
            assert_eager_strides(compiled, eager, what=variant)
