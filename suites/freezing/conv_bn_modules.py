"""The conv+batchnorm modules the freezing tests fold, with random statistics so that a wrong fold shows."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

# Batch 2 and 9x9 images with a stride-2 3x3 conv give a 4x4 output: big enough for per-channel statistics to
# matter, small enough that each compile is dominated by codegen, not by running the convolution.
IMAGE_SHAPE = (2, 3, 9, 9)
CHANNELS = 8


def _randomise_statistics(running_mean: torch.Tensor, running_var: torch.Tensor, *affine: torch.Tensor) -> None:
    # Default statistics (mean 0, var 1, weight 1, bias 0) fold to an identity: a fold that drops or misapplies
    # the scale would still match eager. Random ones make every channel's scale and shift distinct.
    with torch.no_grad():
        running_mean.uniform_(-1, 1)
        running_var.uniform_(0.5, 2.0)
        for tensor in affine:
            tensor.normal_()


class ConvBatchNorm(nn.Module):
    # eps=1e-3 (not the default) so a fold that ignores the module's eps is visible.
    def __init__(self, bias: bool = True) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, CHANNELS, kernel_size=3, stride=2, bias=bias)
        self.bn = nn.BatchNorm2d(CHANNELS, eps=1e-3)
        _randomise_statistics(self.bn.running_mean, self.bn.running_var, self.bn.weight, self.bn.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(x))


class ConvFunctionalBatchNorm(nn.Module):
    """``F.batch_norm`` on buffers instead of an ``nn.BatchNorm2d`` module: the fold must find them by value."""

    def __init__(self, bias: bool = False) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, CHANNELS, kernel_size=3, stride=2, bias=bias)
        for name in ("running_mean", "running_var", "weight", "bias"):
            self.register_buffer(f"bn_{name}", torch.empty(CHANNELS))
        _randomise_statistics(self.bn_running_mean, self.bn_running_var, self.bn_weight, self.bn_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.batch_norm(
            self.conv(x), self.bn_running_mean, self.bn_running_var, self.bn_weight, self.bn_bias, False, 0.1, 1e-5
        )


class ConvFeedingTwoBatchNorms(nn.Module):
    """One conv normalised by two batchnorms with different statistics: it cannot be folded into both."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, CHANNELS, kernel_size=3, stride=2, bias=True)
        self.bn = nn.BatchNorm2d(CHANNELS, eps=1e-3)
        self.bn2 = nn.BatchNorm2d(CHANNELS, eps=0.1)
        for bn in (self.bn, self.bn2):
            _randomise_statistics(bn.running_mean, bn.running_var, bn.weight, bn.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(x)) + self.bn2(self.conv(x))


class ConvFeedingTwoFunctionalBatchNorms(ConvFunctionalBatchNorm):
    """Functional variant: the two batch norms share variance and affine terms but not the mean."""

    def __init__(self) -> None:
        super().__init__(bias=True)
        self.register_buffer("bn_running_mean2", torch.empty(CHANNELS).uniform_(-1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        stats = (self.bn_running_var, self.bn_weight, self.bn_bias, False, 0.1, 1e-5)
        return F.batch_norm(self.conv(x), self.bn_running_mean, *stats) + F.batch_norm(
            self.conv(x), self.bn_running_mean2, *stats
        )
