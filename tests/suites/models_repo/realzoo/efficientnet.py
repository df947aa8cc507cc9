"""timm's EfficientNet, the declared model of this module.

Each declared model is a target of its own module (compile-ci.toml), so a pull request that changes one model runs
that model's tests and takes the others' from its base. The factory returns the module in training mode, so the
suites check a training step (dropout under inductor's fallback_random, BatchNorm with batch statistics) as well as
inference where they put it in eval mode.
"""

import torch

from .vision_ops import import_torchvision


def _efficientnet():
    # timm's EfficientNet class with two of B0's stages (depthwise-separable and inverted-residual blocks with
    # squeeze-excitation, SiLU, BatchNormAct2d): B0 was the other BatchNorm network red on CPU in issue 31.
    import_torchvision()  # timm imports it
    from timm.models._efficientnet_builder import decode_arch_def
    from timm.models.efficientnet import EfficientNet

    arch = decode_arch_def([["ds_r1_k3_s1_e1_c16_se0.25"], ["ir_r1_k3_s2_e6_c24_se0.25"]])
    return EfficientNet(block_args=arch, num_features=64, stem_size=16, num_classes=10)


def examples():
    return [("timm_efficientnet", _efficientnet, (torch.randn(2, 3, 32, 32),))]
