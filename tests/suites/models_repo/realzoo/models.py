"""The declared models: one real class per library, in configurations small enough for a CPU CI run.

Each factory returns the module in training mode, so the suites check a training step (dropout under inductor's
fallback_random, BatchNorm with batch statistics) as well as inference where they put it in eval mode.
"""

import torch

from .vision_ops import import_torchvision


def _resnet():
    # torchvision's ResNet class with one BasicBlock per stage (ResNet-18 has two): the same layers, half the graph.
    # A batch of 2 is what turned ResNet-18 red on CPU (issue 31): batch statistics over 2 samples per channel.
    resnet = import_torchvision().models.resnet
    return resnet.ResNet(resnet.BasicBlock, [1, 1, 1, 1], num_classes=10)


def _efficientnet():
    # timm's EfficientNet class with two of B0's stages (depthwise-separable and inverted-residual blocks with
    # squeeze-excitation, SiLU, BatchNormAct2d): B0 was the other BatchNorm network red on CPU in issue 31.
    import_torchvision()  # timm imports it
    from timm.models._efficientnet_builder import decode_arch_def
    from timm.models.efficientnet import EfficientNet

    arch = decode_arch_def([["ds_r1_k3_s1_e1_c16_se0.25"], ["ir_r1_k3_s2_e6_c24_se0.25"]])
    return EfficientNet(block_args=arch, num_features=64, stem_size=16, num_classes=10)


def _gpt2():
    # transformers' GPT2LMHeadModel with one block of width 32: causal self-attention, GELU, LayerNorm, tied
    # embeddings. No KV cache (a Cache object is not a tensor to compare).
    import_torchvision()  # transformers imports it when it is installed
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=96, n_positions=16, n_embd=32, n_layer=1, n_head=2, use_cache=False,
                        bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config)


def examples():
    images = torch.randn(2, 3, 32, 32)
    tokens = torch.randint(0, 96, (2, 12))
    return [
        ("tv_resnet", _resnet, (images,)),
        ("timm_efficientnet", _efficientnet, (images,)),
        ("hf_gpt2", _gpt2, (tokens,)),
    ]
