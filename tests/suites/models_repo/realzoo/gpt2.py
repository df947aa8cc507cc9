"""transformers' GPT-2, the declared model of this module.

Each declared model is a target of its own module (compile-ci.toml), so a pull request that changes one model runs
that model's tests and takes the others' from its base. The factory returns the module in training mode, so the
suites check a training step (dropout under inductor's fallback_random, BatchNorm with batch statistics) as well as
inference where they put it in eval mode.
"""

import torch

from .vision_ops import import_torchvision


def _gpt2():
    # transformers' GPT2LMHeadModel with one block of width 32: causal self-attention, GELU, LayerNorm, tied
    # embeddings. No KV cache (a Cache object is not a tensor to compare).
    import_torchvision()  # transformers imports it when it is installed
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=96, n_positions=16, n_embd=32, n_layer=1, n_head=2, use_cache=False,
                        bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config)


def examples():
    return [("hf_gpt2", _gpt2, (torch.randint(0, 96, (2, 12)),))]
