"""torch.compile (inductor) gives eager's results: inference, training, graph breaks, dynamic shapes, mutation."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from torch import nn

from .. import explain, harness, judging, module_runs, targets


class SmallMLP(nn.Module):
    # Widths 12 -> 20 -> 6 are not multiples of the CPU vector width (8 or 16 floats), so inductor's vectorised
    # main loop and its scalar tail both run; LayerNorm and GELU add a reduction and a transcendental to fuse.
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(12, 20), nn.LayerNorm(20), nn.GELU(), nn.Linear(20, 6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class SmallConvNet(nn.Module):
    # 10x10 images pool to an odd 5x5, so the second conv and the average pool see sizes that tile unevenly;
    # 8 channels keep the convolutions cheap while BatchNorm still has per-channel statistics to get right.
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, kernel_size=3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 8, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


# Batch 5 (not 1, which dynamo specialises on, nor a power of two) keeps every batch-dependent size "unremarkable".
BUILTIN_MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...]]] = {
    "mlp": (SmallMLP, (5, 12)),
    "convnet": (SmallConvNet, (5, 3, 10, 10)),
}


def _check_against_eager(
    eager_model: nn.Module, compiled_model: nn.Module, inputs: tuple[object, ...], *, backward: bool,
    subject: explain.Subject | None = None,
) -> tuple[module_runs.ModuleRun, module_runs.ModuleRun, module_runs.ModuleRun]:
    """Run eager, then compiled, then an fp64 copy; judge outputs (and gradients) against the fp64 reference, with
    a derived allowance for batch statistics (suites/batch_statistics.py); a declared model's failure explains itself.

    ``compiled_model`` may be ``eager_model`` itself: a forward that depends on earlier calls then shows up.
    """
    # Copied before any call changes module state: the reference, and the start of the step for noise runs.
    reference, pristine = copy.deepcopy(eager_model).to(torch.float64), copy.deepcopy(eager_model)
    eager = module_runs.forward_and_grads(eager_model, eager_model, inputs, backward=backward)
    compiled_fn = torch.compile(compiled_model, backend="inductor")
    with explain.crash_in_generated_code(subject, backward=backward):
        compiled = module_runs.forward_and_grads(compiled_fn, compiled_model, inputs, backward=backward)
    fp64 = module_runs.forward_and_grads(reference, reference, module_runs.to_fp64(inputs), backward=backward)
    explain.judge_step(compiled, eager, fp64, pristine=pristine, inputs=inputs, backward=backward, subject=subject)
    return eager, compiled, fp64


@pytest.mark.parametrize("name", list(BUILTIN_MODELS))
def test_inference(name: str, device: str) -> None:
    factory, shape = BUILTIN_MODELS[name]
    model = factory().to(device).eval()
    _check_against_eager(model, model, (torch.randn(shape, device=device),), backward=False)


def test_inference_generates_inductor_code(device: str) -> None:
    # Proves the checks above ran inductor's generated code, not a silent fallback to eager.
    model = SmallMLP().to(device).eval()
    with torch.no_grad():
        _, code = harness.run_and_get_code(torch.compile(model, backend="inductor"), torch.randn(5, 12, device=device))
    assert code, "inductor produced no output code for the MLP"
    assert any("def call(" in source for source in code), "inductor output code has no call() entry point"


@pytest.mark.parametrize("name", list(BUILTIN_MODELS))
def test_training_step(name: str, device: str) -> None:
    # Separate copies so buffers (BatchNorm running statistics) are updated exactly once on each side.
    factory, shape = BUILTIN_MODELS[name]
    eager_model = factory().to(device).train()
    compiled_model = copy.deepcopy(eager_model)
    inputs = (torch.randn(shape, device=device),)
    reference = module_runs.fp64_step(eager_model, inputs, backward=True)
    eager, compiled, fp64 = _check_against_eager(eager_model, compiled_model, inputs, backward=True)
    assert compiled.grads.keys() == dict(eager_model.named_parameters()).keys(), "some parameters got no gradient"
    judging.assert_close_to_reference(compiled.buffers, eager.buffers, fp64.buffers, what="buffer",
                                      rerun=lambda: reference().buffers)


def test_manual_graph_break(device: str) -> None:
    graph_break = harness.graph_break_function()

    def softplus_then_norm(x: torch.Tensor) -> torch.Tensor:
        y = nn.functional.softplus(x) * 3
        graph_break()
        return y / y.norm(dim=-1, keepdim=True)

    # 6x10: a reduction over a row length that is not a multiple of the vector width, on both sides of the break.
    x = torch.randn(6, 10, device=device)
    counter = harness.compile_counter("inductor")
    actual = torch.compile(softplus_then_norm, backend=counter)(x.clone())
    judging.assert_close_to_reference(actual, softplus_then_norm(x.clone()), lambda: softplus_then_norm(x.double()))
    assert counter.frame_count == 2, f"expected one graph before and one after the break, got {counter.frame_count}"
    assert harness.graph_break_count() >= 1, "dynamo did not record the graph break"


def test_dynamic_shapes_one_graph_for_all_sizes(device: str) -> None:
    def gated_projection(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        h = x @ w
        return (h.sigmoid() * h).sum(dim=1)

    counter = harness.compile_counter("inductor")
    compiled = torch.compile(gated_projection, backend=counter, dynamic=True)
    w = torch.randn(6, 9, device=device)
    # Batch sizes avoid 0 and 1 (always specialised) and share no factor, so no accidental divisibility guard holds.
    def run(fn: Callable[..., torch.Tensor], x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        xi, wi = x.clone().requires_grad_(), w.clone().requires_grad_()
        out = fn(xi, wi)
        out.sum().backward()
        return out.detach(), xi.grad, wi.grad

    for batch in (5, 7, 11):
        x = torch.randn(batch, 6, device=device)
        judging.assert_close_to_reference(run(compiled, x, w), run(gated_projection, x, w),
                                          lambda x=x: run(gated_projection, x.double(), w.double()),
                                          what=f"batch_{batch}(output, x.grad, w.grad)")
    assert counter.frame_count == 1, f"recompiled for new batch sizes: {counter.frame_count} graphs"


def _mutate_given_view(x: torch.Tensor) -> torch.Tensor:
    x.mul_(2).add_(1)
    return x.sum()


def _mutate_diagonal_of_input(base: torch.Tensor) -> torch.Tensor:
    base.diagonal().mul_(2).add_(1)
    return base.sum()


# Integer-valued floats keep every result exact, so the base tensors must match eager bit for bit.
MUTATIONS: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], Callable[[torch.Tensor], torch.Tensor]]] = {
    # The input is a strided view (every other column) of a base the compiled code never sees.
    "input_is_view_of_base": (_mutate_given_view, lambda base: base[:, 1::2]),
    # The compiled code takes a non-contiguous view (the diagonal) of its input and mutates that.
    "view_of_input_mutated": (_mutate_diagonal_of_input, lambda base: base),
}


@pytest.mark.parametrize("case", list(MUTATIONS))
def test_mutation_through_view_reaches_base(case: str, device: str) -> None:
    fn, view_of = MUTATIONS[case]
    eager_base = torch.arange(30.0, device=device).reshape(5, 6)
    compiled_base = eager_base.clone()
    expected = fn(view_of(eager_base))
    actual = torch.compile(fn, backend="inductor")(view_of(compiled_base))
    torch.testing.assert_close(actual, expected, rtol=0, atol=0)
    torch.testing.assert_close(
        compiled_base, eager_base, rtol=0, atol=0, msg=lambda m: f"mutation did not reach the base: {m}"
    )


def test_declared_model(
    declared_model: targets.DeclaredModel | targets.TargetError, device: str, request: pytest.FixtureRequest
) -> None:
    # Declared models run as their factory returns them (train or eval); random ops use eager's RNG under inductor
    # so dropout masks match. One instance serves eager then compiled, so a forward whose result depends on how
    # often it was called (hidden state) is reported rather than hidden by a fresh copy.
    if isinstance(declared_model, targets.TargetError):
        declared_model.fail()
    model = declared_model.factory().to(device)
    inputs = module_runs.map_tensors(declared_model.example_inputs, lambda t: t.to(device))
    backward = any(p.requires_grad and p.is_floating_point() for p in model.parameters())
    subject = explain.Subject(request.node.nodeid, declared_model, device)
    explain.forget(subject.nodeid)
    with harness.inductor_config(fallback_random=True):
        _check_against_eager(model, model, inputs, backward=backward, subject=subject)
