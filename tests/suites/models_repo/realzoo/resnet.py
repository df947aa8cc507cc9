"""torchvision's ResNet, the declared model of this module.

Each declared model is a target of its own module (compile-ci.toml), so a pull request that changes one model runs
that model's tests and takes the others' from its base. The factory returns the module in training mode, so the
suites check a training step (dropout under inductor's fallback_random, BatchNorm with batch statistics) as well as
inference where they put it in eval mode.
"""

import torch

from .vision_ops import import_torchvision


def _resnet():
    # torchvision's ResNet class with one BasicBlock per stage (ResNet-18 has two): the same layers, half the graph.
    # A batch of 2 is what turned ResNet-18 red on CPU (issue 31): batch statistics over 2 samples per channel.
    resnet = import_torchvision().models.resnet
    return resnet.ResNet(resnet.BasicBlock, [1, 1, 1, 1], num_classes=10)


def examples():
    return [("tv_resnet", _resnet, (torch.randn(2, 3, 32, 32),))]
