"""The distributed suite's built-in models: small enough to compile on two CPU ranks, shaped for what DDP and FSDP2
do to a compiled graph (gradient buckets, per-layer shards, integer inputs)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

# DDP's bucket size in this suite (DistributedDataParallel(bucket_cap_mb=...)); DDPOptimizer splits a compiled graph
# where a bucket fills. DDP's first bucket holds 1 MiB whatever this says, so 1 is the smallest cap that works.
BUCKET_CAP_MB = 1


class ResidualBlock(nn.Module):
    """``h + tanh(linear(norm(h)))`` at width 512: 1 MiB of float32 weights, one DDP bucket's worth."""

    def __init__(self, width: int = 512) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.linear = nn.Linear(width, width)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + torch.tanh(self.linear(self.norm(h)))


class BucketedMLP(nn.Module):
    """Three residual blocks: more than one DDP bucket, so DDPOptimizer must cut the compiled graph at least once,
    and three FSDP2 units, each gathering its weights just before it runs."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(32, 512)
        self.blocks = nn.ModuleList(ResidualBlock() for _ in range(3))
        self.out = nn.Linear(512, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.inp(x))
        for block in self.blocks:
            h = block(h)
        return self.out(h)


class AttentionBlock(nn.Module):
    """Pre-norm causal self-attention with a residual, through scaled_dot_product_attention."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm(x)).view(batch, length, 3, self.heads, -1).unbind(dim=2)
        attended = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                  is_causal=True)
        return x + self.proj(attended.transpose(1, 2).reshape(batch, length, width))


class TinyTransformer(nn.Module):
    """Token ids -> embedding -> one attention block -> logits: integer inputs and an embedding's backward
    (an accumulating index_put) under DDP and FSDP2."""

    def __init__(self, vocab: int = 64, width: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.block = AttentionBlock(width, heads)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(self.embed(tokens)))


@dataclass(frozen=True)
class CorpusModel:
    name: str
    factory: Callable[[], nn.Module]
    make_inputs: Callable[[], tuple[torch.Tensor, ...]]  # called after torch.manual_seed(0): the same on every rank
    # Submodules that fully_shard makes FSDP2 units of their own (the root is always one), blocks of the model's own
    # as in a real FSDP2 setup: dynamo does not start a frame in a torch.nn layer, so a bare nn.Linear unit would
    # run eagerly. Declared models get the root only: a submodule whose weights are used without calling it would
    # never gather them.
    fsdp_units: tuple[str, ...] = ()


CORPUS = {
    model.name: model
    for model in (
        CorpusModel("bucketed_mlp", BucketedMLP, lambda: (torch.randn(8, 32),), ("blocks.0", "blocks.1", "blocks.2")),
        CorpusModel("tiny_transformer", TinyTransformer, lambda: (torch.randint(0, 64, (2, 16)),), ("block",)),
    )
}
# Models of the corpus whose weights fill more than one DDP bucket: DDPOptimizer must split their graph.
MULTI_BUCKET = ("bucketed_mlp",)
