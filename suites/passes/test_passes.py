"""Inductor's custom-pass hooks take effect, the pattern matcher counts what a custom pass matched, and the passes a
repository declares keep numerics on a small model zoo (and its own models)."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torch.testing import FileCheck

from .. import explain, harness, judging, module_runs, targets
from ..shard_plan import BUILTIN_SPEC
from .conftest import DeclaredPass

aten = torch.ops.aten


def cos_to_sin(graph: torch.fx.Graph) -> None:
    """Retarget every cosine to a sine, at whichever level the hook sees the graph (torch IR before autograd,
    ATen after)."""
    for node in graph.nodes:
        if node.op == "call_function" and node.target in (aten.cos.default, torch.cos):
            node.target = aten.sin.default if node.target is aten.cos.default else torch.sin
        elif node.op == "call_method" and node.target == "cos":
            node.target = "sin"


def cosine_chain(x: torch.Tensor) -> torch.Tensor:
    return x.cos().cos() * 2


def sine_chain(x: torch.Tensor) -> torch.Tensor:
    return x.sin().sin() * 2


# 37 elements: not a multiple of any vector width, so both the vectorised loop and its scalar tail are generated and
# both must have been rewritten for the code check below to pass.
CHAIN_SIZE = 37


@pytest.mark.parametrize("hook", harness.CUSTOM_PASS_HOOKS)
def test_cos_to_sin_pass_takes_effect(hook: str, device: str) -> None:
    # A uuid keyed on the pass's behaviour makes the FX graph cache safe: a cached graph compiled with this pass is
    # only reused when the same pass is installed again.
    rewrite = harness.custom_graph_pass(cos_to_sin, uuid="compile-ci/cos_to_sin/v1")
    x = torch.randn(CHAIN_SIZE, device=device)
    with harness.inductor_config(**{hook: rewrite}):
        actual, code = harness.run_and_get_code(torch.compile(cosine_chain, backend="inductor"), x)
    torch.testing.assert_close(actual, sine_chain(x), msg=lambda m: f"{hook} did not turn cos into sin: {m}")
    assert code, f"inductor produced no output code with {hook} set"
    FileCheck().check("sin(").check_not("cos(").run("\n".join(code))


def test_without_custom_pass_cos_stays_cos(device: str) -> None:
    # The control for the test above: with no pass installed the compiled chain must compute cosines, so a compiler
    # that rewrites graphs on its own is caught here.
    x = torch.randn(CHAIN_SIZE, device=device)
    actual, code = harness.run_and_get_code(torch.compile(cosine_chain, backend="inductor"), x)
    judging.assert_close_to_reference(actual, cosine_chain(x), lambda: cosine_chain(x.double()))
    FileCheck().check("cos(").check_not("sin(").run("\n".join(code))


def test_pass_uuid_keeps_fx_graph_cache_honest(device: str) -> None:
    # The same graph compiled with and then without the pass: if the pass's uuid were not part of the cache key,
    # the second compile would be served the rewritten (sine) kernel from the cache.
    x = torch.randn(CHAIN_SIZE, device=device)
    rewrite = harness.custom_graph_pass(cos_to_sin, uuid="compile-ci/cos_to_sin/v1")
    with harness.inductor_config(fx_graph_cache=True, post_grad_custom_post_pass=rewrite):
        with_pass = torch.compile(cosine_chain, backend="inductor")(x)
    harness.reset_dynamo()
    with harness.inductor_config(fx_graph_cache=True):
        without_pass = torch.compile(cosine_chain, backend="inductor")(x)
    torch.testing.assert_close(with_pass, sine_chain(x))
    torch.testing.assert_close(without_pass, cosine_chain(x), msg=lambda m: f"stale cache entry served: {m}")


def test_pass_without_uuid_bypasses_fx_graph_cache(device: str) -> None:
    # Inductor cannot key its cache on a pass that names no uuid, so it must compile afresh rather than risk
    # serving a graph some other pass produced.
    rewrite = harness.custom_graph_pass(cos_to_sin, uuid=None)
    x = torch.randn(CHAIN_SIZE, device=device)
    with harness.inductor_config(fx_graph_cache=True, post_grad_custom_post_pass=rewrite):
        torch.testing.assert_close(torch.compile(cosine_chain, backend="inductor")(x), sine_chain(x))
    bypasses = harness.dynamo_counters().get("inductor", {}).get("fxgraph_cache_bypass", 0)
    assert bypasses >= 1, "a pass without uuid() did not bypass the FX graph cache"


def _add_relu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.relu(a + b)


def _add_clamp(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.clamp_min(a + b, 0.0)


def two_add_relus(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    # Two disjoint add->relu pairs (the pattern) around one that must not match (relu of a product).
    return torch.relu(a + b) * torch.relu(b * c) + torch.relu(c + a)


@pytest.mark.parametrize("hook", ["post_grad_custom_pre_pass", "post_grad_custom_post_pass"])
def test_pattern_matcher_pass_counts_matches(hook: str, device: str) -> None:
    matcher = harness.pattern_matcher_pass()
    examples = [torch.empty(4, device=device), torch.empty(4, device=device)]
    harness.register_forward_replacement(_add_relu, _add_clamp, examples, matcher)
    # uuid None: the pass must really run (a cache hit would skip it and count nothing); inductor's own pattern
    # matcher is off so the counters hold only what this pass matched.
    custom = harness.custom_graph_pass(matcher.apply, uuid=None)
    a, b, c = (torch.randn(CHAIN_SIZE, device=device) for _ in range(3))
    with harness.inductor_config(pattern_matcher=False, **{hook: custom}):
        actual = torch.compile(two_add_relus, backend="inductor")(a, b, c)
    judging.assert_close_to_reference(actual, two_add_relus(a, b, c),
                                      lambda: two_add_relus(a.double(), b.double(), c.double()))
    matches, nodes = harness.pattern_matcher_counts()
    assert (matches, nodes) == (2, 4), f"expected 2 matches of add->relu (4 nodes), counted {matches} ({nodes} nodes)"


class RotaryAttention(nn.Module):
    # Rotary position embedding (cos/sin tables), scaled dot-product scores and a softmax: the cosines make any
    # pass or compiler that confuses trigonometric ops visible; 6 tokens x 8 features keep compiles small.
    def __init__(self, features: int = 8, tokens: int = 6) -> None:
        super().__init__()
        self.qkv = nn.Linear(features, 3 * features)
        self.out = nn.Linear(features, features)
        angles = torch.arange(tokens)[:, None] / 10000 ** (torch.arange(features // 2) / (features // 2))
        self.register_buffer("angles", angles.float())

    def rotate(self, t: torch.Tensor) -> torch.Tensor:
        even, odd = t[..., 0::2], t[..., 1::2]
        cos, sin = self.angles.cos(), self.angles.sin()
        return torch.cat([even * cos - odd * sin, even * sin + odd * cos], dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = self.rotate(q) @ self.rotate(k).transpose(-1, -2) / math.sqrt(q.shape[-1])
        return self.out(scores.softmax(dim=-1) @ v)


class ConvBlock(nn.Module):
    # conv -> batch norm -> relu: the chain that conv/bn/activation fusion passes most often target.
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x).mean(dim=(2, 3))


BUILTIN = BUILTIN_SPEC  # the spec of the suite's own zoo models: the built-in corpus's group (suites/sharding.py)


def _builtin_zoo() -> list[targets.DeclaredModel]:
    torch.manual_seed(0)
    # Batch 3 and 7x7 images: small, odd sizes that no kernel can special-case.
    return [
        targets.DeclaredModel("rotary_attention", BUILTIN, RotaryAttention, (torch.randn(3, 6, 8),)),
        targets.DeclaredModel("conv_block", BUILTIN, ConvBlock, (torch.randn(3, 3, 7, 7),)),
    ]


def _pass_models() -> list[targets.DeclaredModel | targets.TargetError]:
    return [*_builtin_zoo(), *targets.declared_models()]


class PassObserver:
    """Wraps a graph pass; counts its calls, the graph sizes around them and the pattern-matcher counters they
    moved."""

    def __init__(self, fn: Callable[[torch.fx.Graph], Any] | None = None) -> None:
        self.fn = fn
        self.calls = 0
        self.nodes_before = 0
        self.nodes_after = 0
        self.matches = 0
        self.matched_nodes = 0

    def __call__(self, graph: torch.fx.Graph) -> None:
        self.calls += 1
        self.nodes_before += len(graph.nodes)
        matches, nodes = harness.pattern_matcher_counts()
        if self.fn is not None:
            self.fn(graph)
        after_matches, after_nodes = harness.pattern_matcher_counts()
        self.matches += after_matches - matches
        self.matched_nodes += after_nodes - nodes
        self.nodes_after += len(graph.nodes)

    def properties(self) -> dict[str, int]:
        return {
            "pass_calls": self.calls,
            "graph_nodes_before": self.nodes_before,
            "graph_nodes_after": self.nodes_after,
            "pattern_matcher_count": self.matches,
            "pattern_matcher_nodes": self.matched_nodes,
        }


def _training_step_matches_eager(
    model_entry: targets.DeclaredModel, device: str, subject: explain.Subject | None = None
) -> None:
    """Compile one forward+backward of the model with inductor and judge outputs and parameter gradients against
    eager and an fp64 copy; random ops use eager's RNG so dropout masks agree. A declared model's red explains itself
    (``subject``, suites/explain.py)."""
    model = model_entry.factory().to(device)
    inputs = module_runs.map_tensors(model_entry.example_inputs, lambda t: t.to(device))
    backward = any(p.requires_grad and p.is_floating_point() for p in model.parameters())
    compiled_model = copy.deepcopy(model)
    reference, pristine = copy.deepcopy(model).to(torch.float64), copy.deepcopy(model)
    eager = module_runs.forward_and_grads(model, model, inputs, backward=backward)
    with harness.inductor_config(fallback_random=True):
        compiled_fn = torch.compile(compiled_model, backend="inductor")
        with explain.crash_in_generated_code(subject, backward=backward):
            compiled = module_runs.forward_and_grads(compiled_fn, compiled_model, inputs, backward=backward)
    fp64 = module_runs.forward_and_grads(reference, reference, module_runs.to_fp64(inputs), backward=backward)
    # Batch statistics get their derived allowance (suites/batch_statistics.py), as in correctness and autograd.
    explain.judge_step(compiled, eager, fp64, pristine=pristine, inputs=inputs, backward=backward, subject=subject)


def _subject(request: pytest.FixtureRequest, entry: targets.DeclaredModel, device: str, no_minifier: str = ""
             ) -> explain.Subject | None:
    """A declared model's explanation subject (the built-in zoo is not in the repository, so minify.py could not
    rebuild it: its reds explain their tolerance only); earlier attempts' files forgotten."""
    explain.forget(request.node.nodeid)
    if entry.spec == BUILTIN:
        return None
    return explain.Subject(request.node.nodeid, entry, device, no_minifier=no_minifier)


@pytest.mark.parametrize("model_entry", _pass_models(), ids=lambda entry: entry.test_id)
def test_every_hook_sees_the_graphs_and_numerics_hold(
    model_entry: targets.DeclaredModel | targets.TargetError, device: str, request: pytest.FixtureRequest
) -> None:
    # Observing passes on all five hooks at once: each must be called, post-grad ones once for the forward and once
    # for the backward graph, and a compile with every hook in use must still match eager on a training step. The
    # observers change no graph, so torch's minifier (which runs without them) reproduces the same step.
    if isinstance(model_entry, targets.TargetError):
        model_entry.fail()
    subject = _subject(request, model_entry, device)
    observers = {hook: PassObserver() for hook in harness.CUSTOM_PASS_HOOKS}
    hooks = {hook: harness.custom_graph_pass(observer, uuid=None) for hook, observer in observers.items()}
    with harness.inductor_config(**hooks):
        _training_step_matches_eager(model_entry, device, subject)
    silent = [hook for hook, observer in observers.items() if observer.calls == 0]
    assert not silent, f"custom pass hooks never called: {', '.join(silent)}"
    for hook in ("post_grad_custom_pre_pass", "post_grad_custom_post_pass"):
        assert observers[hook].calls >= 2, f"{hook} saw {observers[hook].calls} graph(s), expected forward+backward"


@pytest.mark.parametrize("model_entry", _pass_models(), ids=lambda entry: entry.test_id)
def test_declared_pass(
    declared_pass: DeclaredPass | targets.TargetError,
    model_entry: targets.DeclaredModel | targets.TargetError,
    device: str,
    record_property: Callable[[str, object], None],
    request: pytest.FixtureRequest,
) -> None:
    # The repository's pass runs on its hook during a training step; its call and match counters go into the
    # JUnit XML as <property> elements of this test, numerics are judged against eager and fp64.
    for entry in (declared_pass, model_entry):
        if isinstance(entry, targets.TargetError):
            entry.fail()
    subject = _subject(request, model_entry, device, no_minifier=(
        f"torch's minifier cannot reproduce a step under a custom pass: torch leaves {declared_pass.hook} out of "
        f"the inductor config its repro saves, so it would compile without {declared_pass.spec}; this test's "
        "repro.py reruns it with the pass"
    ))
    user_pass = declared_pass.fn() if isinstance(declared_pass.fn, type) else declared_pass.fn
    observer = PassObserver(user_pass)
    # uuid None: compile afresh every time so the pass runs and its counters are real, whatever uuid it names.
    with harness.inductor_config(**{declared_pass.hook: harness.custom_graph_pass(observer, uuid=None)}):
        try:
            _training_step_matches_eager(model_entry, device, subject)
        finally:
            record_property("declared_pass", declared_pass.spec)
            record_property("hook", declared_pass.hook)
            for name, value in observer.properties().items():
                record_property(name, value)
    assert observer.calls >= 1, f"{declared_pass.hook} never called {declared_pass.spec}"
