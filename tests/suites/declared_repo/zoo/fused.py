"""Pointwise chains the repository wants fused."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def bias_gelu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.gelu(x + bias, approximate="tanh")


def scaled_swish(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(x * scale)


def examples() -> list[tuple[str, object, tuple[torch.Tensor, ...]]]:
    return [
        ("bias_gelu", bias_gelu, (torch.randn(8, 32, requires_grad=True), torch.randn(32, requires_grad=True))),
        ("scaled_swish", scaled_swish, (torch.randn(64, requires_grad=True), torch.randn(64, requires_grad=True))),
    ]
