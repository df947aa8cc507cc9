"""Declared functions to fuse: activations as the libraries ship them, each a chain of pointwise ops inductor should
fuse into one kernel (forward and backward)."""

import torch


def examples():
    from transformers.activations import NewGELUActivation

    from .vision_ops import import_torchvision

    import_torchvision()  # timm imports it
    from timm.layers.activations import hard_mish

    # 4 x 33: a row length that is not a multiple of the vector width, so the scalar tail runs too.
    x = torch.randn(4, 33, requires_grad=True)
    return [
        ("hf_gelu_new", NewGELUActivation(), (x,)),  # GPT-2's tanh-approximated GELU
        ("timm_hard_mish", hard_mish, (x,)),
    ]
