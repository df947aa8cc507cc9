"""Training steps, the same code for one rank of a distributed run and for the single-process run it must equal.

Every rank sees the same inputs but backpropagates its own random cotangents (seeded by step and rank), so the
ranks' gradients differ and the all-reduce (DDP) or reduce-scatter (FSDP2) really has something to average: a
wrapper that dropped it would leave each rank with its own gradient. The single-process step runs every rank's
forward and backward in turn, each scaled by 1/world, which is what averaging gradients over the ranks computes.
Public torch APIs only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from suites.module_runs import clone_inputs, flatten_outputs

WORLD_SIZE = 2
# Two steps: the second runs the graphs compiled in the first, so a wrapper that recompiles every step (a guard on
# state the optimizer or FSDP2 changes) is counted, and the second step's gradients are taken at updated weights.
STEPS = 2
LEARNING_RATE = 0.01


def cotangent(t: torch.Tensor, step: int, rank: int, scale: float) -> torch.Tensor:
    # Drawn in float64 on the CPU and cast: the same numbers on every device and for the fp64 reference.
    generator = torch.Generator().manual_seed(1234 + 1000 * step + rank)
    values = torch.randn(t.shape, generator=generator, dtype=torch.float64) * scale
    return values.to(dtype=t.dtype, device=t.device)


def gathered(t: torch.Tensor) -> torch.Tensor:
    """A parameter or gradient as one whole tensor on the CPU; FSDP2's sharded DTensors are all-gathered first (a
    collective: every rank must gather the same tensors in the same order)."""
    full = t.full_tensor() if hasattr(t, "full_tensor") else t
    return full.detach().cpu().clone()


def _grads(module: nn.Module) -> dict[str, torch.Tensor]:
    return {name: gathered(p.grad) for name, p in module.named_parameters() if p.grad is not None}


def train(call: Callable[..., Any], module: nn.Module, inputs: tuple[Any, ...], ranks: Iterable[int],
          steps: int = STEPS) -> dict[str, Any]:
    """``steps`` SGD steps of ``call`` (``module``, its DDP/FSDP2 wrapper or their compiled form), backpropagating
    the cotangents of ``ranks``; returns every step's gradients and the parameters after the last step."""
    ranks = list(ranks)
    optimizer = torch.optim.SGD(module.parameters(), lr=LEARNING_RATE)
    grads = []
    for step in range(steps):
        optimizer.zero_grad(set_to_none=True)
        for rank in ranks:
            torch.manual_seed(step)  # dropout draws the same masks on every rank and in the single-process run
            outputs = call(*clone_inputs(inputs))
            leaves = [t for _, t in flatten_outputs(outputs) if isinstance(t, torch.Tensor) and t.requires_grad]
            torch.autograd.backward(leaves, [cotangent(t, step, rank, 1 / len(ranks)) for t in leaves])
        grads.append(_grads(module))
        optimizer.step()
    params = {name: gathered(p) for name, p in module.named_parameters()}
    return {"grads": grads, "params": params}


def trainable(module: nn.Module) -> bool:
    """Whether DDP and FSDP2 have anything to synchronise (DDP refuses a module without such a parameter)."""
    return any(p.requires_grad for p in module.parameters())
