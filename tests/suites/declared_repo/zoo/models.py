"""Models the repository ships."""

from __future__ import annotations

import torch
from torch import nn


class DoubledResidual(nn.Module):
    """``h + h`` after a projection: the post-grad pass of this repository rewrites it into ``h * 2``."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 16)
        self.out = nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.proj(x))
        return self.out(h + h)


class ConvHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(self.conv(x)))
        return self.fc(y.mean(dim=(2, 3)))


def examples() -> list[tuple[str, type[nn.Module], tuple[torch.Tensor, ...]]]:
    return [
        ("doubled_residual", DoubledResidual, (torch.randn(4, 16),)),
        ("conv_head", ConvHead, (torch.randn(2, 3, 8, 8),)),
    ]
