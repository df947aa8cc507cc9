"""Architectures torch.compile users ship, tiny (issue 20): each judged as the rest of the suite, compiled against
eager and a float64 copy, forward and backward (parameter gradients); integer and boolean outputs exactly."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from . import breadth_activations as acts
from . import breadth_models as models
from .test_correctness import _check_against_eager


def _edges(device: str) -> torch.Tensor:
    # 5 nodes, 9 edges: node 1 receives three messages (duplicate destinations), node 4 none (the amax/prod
    # reductions keep their initial value there).
    return torch.tensor([[0, 2, 3, 4, 0, 1, 3, 2, 4], [1, 1, 1, 0, 2, 3, 2, 0, 3]], device=device)


def _recommender_inputs(device: str) -> tuple[torch.Tensor, ...]:
    ids = torch.tensor([1, 4, 4, 9, 0, 3, 7, 7], device=device)  # repeated ids inside and across bags
    offsets = torch.tensor([0, 3, 5], device=device)
    return (torch.randn(3, 3, device=device), ids, offsets, torch.rand(8, device=device) + 0.5,
            torch.tensor([0, 5, 2], device=device))


# name -> (factory, inputs on a device, train mode). Train mode where the architecture has batch statistics.
CASES: dict[str, tuple[Callable[[], nn.Module], Callable[[str], tuple[torch.Tensor, ...]], bool]] = {
    "resnet_block": (models.ResNetBlock, lambda d: (torch.randn(4, 3, 8, 8, device=d),), True),
    "unet_block": (models.UNetBlock, lambda d: (torch.randn(2, 2, 8, 8, device=d),), False),
    "transformer_kv_cache": (models.TransformerWithKVCache, lambda d: (
        torch.randn(2, 2, 8, device=d), torch.randn(2, 2, 5, 4, device=d), torch.randn(2, 2, 5, 4, device=d)), False),
    "recurrent_cells": (models.RecurrentCells, lambda d: (torch.randn(2, 3, 3, device=d),), False),
    "mixture_of_experts": (models.MixtureOfExperts, lambda d: (torch.randn(5, 6, device=d) * 2,), False),
    "recommender": (models.Recommender, _recommender_inputs, False),
    "graph_convolution": (models.GraphConvolution, lambda d: (torch.randn(5, 4, device=d), _edges(d)), False),
    "scans_and_bits": (models.ScansAndBits, lambda d: (
        torch.rand(3, 6, device=d) + 0.5, torch.randint(0, 40, (3, 6), device=d)), False),
    "activations": (acts.Activations, lambda d: (torch.randn(3, 4, device=d) * 2,), False),
    "losses": (acts.Losses, lambda d: (torch.randn(4, 4, device=d), torch.rand(4, 5, device=d),
                                       torch.tensor([0, 2, 4, 1], device=d)), False),
    "elementwise_math": (acts.ElementwiseMath, lambda d: (
        torch.rand(3, 4, device=d) * 1.8 - 0.9, torch.rand(3, 4, device=d) * 0.9 + 0.05), False),
}


# Stock inductor's CPU kernels that are less accurate than ATen's where results are small (issue 39's per-element rule
# sees them; ops/known_failures.py lists them for the sweep with their evidence): an expected failure while every
# failing tensor is one of these outputs, a failure otherwise.
_EXPM1 = "inductor's vectorised CPU expm1 is exp(x) - 1 (ELU, CELU and SELU go through it)"
KNOWN_UPSTREAM_CPU = {
    ("elementwise_math", "output['atanh']"): "inductor's CPU atanh loses digits near 0 (43 ULPs at -0.014)",
    ("elementwise_math", "output['expm1']"): _EXPM1,
    **{("activations", f"output['{name}']"): _EXPM1 for name in ("elu", "celu", "selu")},
}


@pytest.mark.parametrize("name", list(CASES))
def test_architecture_matches_eager_forward_and_backward(name: str, device: str) -> None:
    factory, make_inputs, train = CASES[name]
    model = factory().to(device).train(train)
    try:
        _check_against_eager(model, model, make_inputs(device), backward=True)
    except pytest.fail.Exception as failure:
        lines = [line.strip() for line in str(failure).splitlines()[1:] if line.startswith("  ")]
        known = {KNOWN_UPSTREAM_CPU.get((name, line.split(" ")[0])) for line in lines} if device == "cpu" else {None}
        if lines and None not in known:
            pytest.xfail("known upstream: " + "; ".join(sorted(k for k in known if k)))
        raise
