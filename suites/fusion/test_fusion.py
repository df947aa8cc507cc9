"""Memory-efficient fusion of pointwise and normalisation chains keeps eager's values and gradients; inductor fuses
a pointwise chain into one kernel; graph CSE merges exactly the duplicates it may (never random ops)."""

from __future__ import annotations

import random
import re
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from .. import explain, harness, judging, module_runs, targets
from .conftest import DeclaredFusion


def gelu_with_bias(bias: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x = bias + y
    return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))


def swish(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(x)


def mish(x: torch.Tensor) -> torch.Tensor:
    return x.mul(torch.tanh(F.softplus(x)))


def hard_sigmoid(x: torch.Tensor) -> torch.Tensor:
    return (x + 3.0).clamp(min=0.0, max=6.0).div(6.0)


def hard_swish(x: torch.Tensor) -> torch.Tensor:
    return x * (x + 3.0).clamp(min=0.0, max=6.0).div(6.0)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    # Written out op by op, so the fuser (not a library kernel) has to get the two reductions right.
    mean = x.mean(-1, keepdim=True)
    centered = x - mean
    variance = (centered * centered).sum(-1, keepdim=True) / x.size(-1)
    return centered * (1.0 / torch.sqrt(variance + 1e-5)) * weight + bias


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    # T5-style: no mean subtraction and no bias; the statistic is taken in float32 whatever the input dtype.
    variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
    return weight * (x * torch.rsqrt(variance + eps))


# Input shapes: 37 elements (not a multiple of any vector width: vector loop plus scalar tail) for pointwise chains,
# (5, 12) rows for the norms so the reduction runs over a short row with a tail.
CHAINS: dict[str, tuple[Callable[..., torch.Tensor], list[tuple[int, ...]]]] = {
    "gelu_bias": (gelu_with_bias, [(37,), (37,)]),
    "swish": (swish, [(37,)]),
    "mish": (mish, [(37,)]),
    "hard_sigmoid": (hard_sigmoid, [(37,)]),
    "hard_swish": (hard_swish, [(37,)]),
    "layer_norm": (layer_norm, [(5, 12), (12,), (12,)]),
    "rms_norm": (rms_norm, [(5, 12), (12,)]),
}
POINTWISE = ["gelu_bias", "swish", "mish", "hard_sigmoid", "hard_swish"]


def _inputs(shapes: list[tuple[int, ...]], device: str) -> list[torch.Tensor]:
    # Scaled so the hard_* clamps see values on both sides of their knees (-3 and 3).
    return [(torch.randn(shape, device=device) * 3).requires_grad_() for shape in shapes]


def _value_and_grads(fn: Callable[..., torch.Tensor], inputs: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    args = [t.detach().clone().requires_grad_() for t in inputs]
    out = fn(*args)
    out.sum().backward()
    return (out.detach(), *(a.grad for a in args))


@pytest.mark.parametrize("chain", list(CHAINS))
def test_memory_efficient_fusion_matches_eager(chain: str, device: str) -> None:
    fn, shapes = CHAINS[chain]
    inputs = _inputs(shapes, device)
    fused = harness.memory_efficient_fusion(fn)
    # TorchScript profiles the first calls and optimises (fuses) later ones: judge the third, fused call.
    for _ in range(3):
        actual = _value_and_grads(fused, inputs)
    expected = _value_and_grads(fn, inputs)
    judging.assert_close_to_reference(actual, expected, lambda: _value_and_grads(fn, [t.double() for t in inputs]),
                                      what=f"{chain}(value, *input grads)")


_KERNEL_DEFINITION = re.compile(r"=\s*async_compile\.(cpp_pybinding|cpp|triton)\(")


@pytest.mark.parametrize("chain", POINTWISE)
def test_inductor_fuses_pointwise_chain_into_one_kernel(chain: str, device: str) -> None:
    # A chain of pointwise ops reads its inputs once and writes one output: one kernel, no intermediates in memory.
    fn, shapes = CHAINS[chain]
    inputs = [t.detach() for t in _inputs(shapes, device)]
    actual, code = harness.run_and_get_code(torch.compile(fn, backend="inductor"), *inputs)
    judging.assert_close_to_reference(actual, fn(*inputs), lambda: fn(*[t.double() for t in inputs]))
    kernels = sum(len(_KERNEL_DEFINITION.findall(source)) for source in code)
    assert kernels == 1, f"{chain}: expected one fused kernel, inductor generated {kernels}"


def _cse(gm: torch.fx.GraphModule) -> tuple[torch.fx.GraphModule, int, int]:
    """CSE ``gm``; return the new module and the node counts before and after. A second CSE must change nothing."""
    new_graph = harness.fx_graph_cse(gm.graph)
    again = harness.fx_graph_cse(new_graph)
    assert len(again.nodes) == len(new_graph.nodes), f"CSE is not idempotent:\n{new_graph}\nthen\n{again}"
    return torch.fx.GraphModule(gm, new_graph), len(gm.graph.nodes), len(new_graph.nodes)


def _no_duplicates(x: torch.Tensor) -> torch.Tensor:
    a = x + 1
    b = x + a
    d = x + x
    return b + d


def _nothing(x: torch.Tensor) -> None:
    return None


def _ones_like_twice(x: torch.Tensor) -> torch.Tensor:
    # ones_like's dtype/layout/device arrive as keyword arguments in the ATen graph.
    return torch.ones_like(x) + torch.ones_like(x)


def _cat_twice(x: torch.Tensor) -> torch.Tensor:
    # The tensor list argument becomes an immutable list inside the node's args.
    return torch.cat((x, x)) + torch.cat((x, x))


def _sums_with_and_without_keepdim(x: torch.Tensor) -> torch.Tensor:
    return x.sum(dim=1) + x.sum(dim=1, keepdim=True) + x.sum(dim=1, keepdim=True) + x.sum(dim=1)


def _four_full_sums(x: torch.Tensor) -> torch.Tensor:
    return x.sum() + x.sum() + x.sum() + x.sum()


# (function, nodes CSE removes)
CSE_CASES: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor | None], int]] = {
    "no_duplicates": (_no_duplicates, 0),
    "empty_graph": (_nothing, 0),
    "kwargs": (_ones_like_twice, 1),
    "nested_immutable_list": (_cat_twice, 1),
    "same_op_different_args": (_sums_with_and_without_keepdim, 2),
    "same_op_four_times": (_four_full_sums, 3),
}


@pytest.mark.parametrize("case", list(CSE_CASES))
def test_cse_merges_exactly_the_duplicates(case: str) -> None:
    fn, removed = CSE_CASES[case]
    x = torch.randn(2, 3)
    gm = harness.make_fx(fn, x)
    new_gm, before, after = _cse(gm)
    assert before - after == removed, f"CSE removed {before - after} nodes, expected {removed}:\n{gm.graph}"
    expected, actual = gm(x), new_gm(x)
    assert (expected is None and actual is None) or torch.equal(actual, expected), "CSE changed the result"


# Each returns the difference of two identical-looking draws: merged into one, it would be exactly zero.
RANDOM_OPS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "rand_like": lambda x: torch.rand_like(x) - torch.rand_like(x),
    "randn": lambda x: torch.randn(64) - torch.randn(64),
    "rand": lambda x: torch.rand(64) - torch.rand(64),
    "randint": lambda x: torch.randint(0, 1000, (64,)) - torch.randint(0, 1000, (64,)),
}


@pytest.mark.parametrize("op", list(RANDOM_OPS))
def test_cse_never_merges_random_ops(op: str) -> None:
    gm = harness.make_fx(RANDOM_OPS[op], torch.randn(64))
    new_gm, before, after = _cse(gm)
    assert before == after, f"CSE merged random {op} calls ({before} -> {after} nodes):\n{gm.graph}"
    assert new_gm(torch.randn(64)).count_nonzero() > 0, f"{op}: after CSE both draws are the same sample"


def _random_chain(rng: random.Random) -> Callable[[torch.Tensor], torch.Tensor]:
    # 40 ops drawn from a small set, each applied to a random earlier value: many exact duplicates arise by chance.
    ops = [torch.clone, torch.cos, torch.tanh, F.gelu]
    plan = [(rng.randrange(len(ops)), rng.randrange(i + 1)) for i in range(40)]

    def chain(x: torch.Tensor) -> torch.Tensor:
        values = [x]
        for op, source in plan:
            values.append(ops[op](values[source]))
        return values[-1]

    return chain


def test_cse_on_random_graphs_keeps_values() -> None:
    rng = random.Random(0)  # fixed: the same graphs on every run
    x = torch.randn(2, 2)
    merged_any = False
    for _ in range(5):
        gm = harness.make_fx(_random_chain(rng), x)
        new_gm, before, after = _cse(gm)
        assert after <= before, f"CSE grew the graph from {before} to {after} nodes"
        merged_any |= after < before
        assert torch.equal(new_gm(x), gm(x)), "CSE changed the result of a random chain"
    assert merged_any, "no duplicate was merged in 5 random chains"


def test_declared_fusion(
    declared_fusion: DeclaredFusion | targets.TargetError, device: str, request: pytest.FixtureRequest
) -> None:
    # The repository's function compiled with inductor against eager and fp64: value, and the gradient of every
    # floating input that requires grad. A red explains itself (suites/explain.py): minify.py compiles the function.
    if isinstance(declared_fusion, targets.TargetError):
        declared_fusion.fail()
    inputs = module_runs.map_tensors(declared_fusion.example_inputs, lambda t: t.to(device))
    subject = explain.Subject(request.node.nodeid, declared_fusion, device)
    explain.forget(subject.nodeid)

    def run(fn: Callable[..., object], args: tuple[object, ...]) -> tuple[object, dict[str, torch.Tensor]]:
        args = module_runs.clone_inputs(args)
        out = fn(*args)
        leaves = [t for _, t in module_runs.flatten_outputs(out) if isinstance(t, torch.Tensor) and t.requires_grad]
        grads: dict[str, torch.Tensor] = {}
        if leaves:
            torch.autograd.backward(leaves, [torch.ones_like(t) for t in leaves])
            grads = {
                f"input[{i}]": a.grad for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.grad is not None
            }
        return module_runs.map_tensors(out, torch.Tensor.detach), grads

    with harness.inductor_config(fallback_random=True):
        torch.manual_seed(0)
        eager = run(declared_fusion.fn, inputs)
        torch.manual_seed(0)
        with explain.crash_in_generated_code(subject, backward=True):
            compiled = run(torch.compile(declared_fusion.fn, backend="inductor"), inputs)

    def fp64() -> tuple[object, dict[str, torch.Tensor]]:
        torch.manual_seed(0)
        return run(declared_fusion.fn, module_runs.to_fp64(inputs))

    reference = fp64()
    explain.judge_outputs(compiled[0], eager[0], reference[0], subject=subject,
                          grads=(compiled[1], eager[1], reference[1]), rerun=lambda: fp64()[0],
                          grads_rerun=lambda: fp64()[1])
