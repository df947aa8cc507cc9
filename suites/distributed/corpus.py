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


class BucketedMLP(nn.Module):
    """Three 512x512 layers, 1 MiB of float32 weights each: more than one DDP bucket, so DDPOptimizer must cut the
    compiled graph at least once. LayerNorm and a residual give the backward something besides matmuls."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(32, 512)
        self.hidden = nn.ModuleList(nn.Linear(512, 512) for _ in range(3))
        self.norm = nn.LayerNorm(512)
        self.out = nn.Linear(512, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.inp(x))
        for layer in self.hidden:
            h = h + torch.tanh(layer(self.norm(h)))
        return self.out(h)


class TinyTransformer(nn.Module):
    """Token ids -> embedding -> one causal attention block -> logits: integer inputs, an embedding's sparse-looking
    backward (index_put accumulation) and scaled_dot_product_attention under DDP and FSDP2."""

    def __init__(self, vocab: int = 64, width: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(vocab, width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm(x)).view(batch, length, 3, self.heads, -1).unbind(dim=2)
        attended = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                  is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, length, width))
        return self.head(x)


@dataclass(frozen=True)
class CorpusModel:
    name: str
    factory: Callable[[], nn.Module]
    make_inputs: Callable[[], tuple[torch.Tensor, ...]]  # called after torch.manual_seed(0): the same on every rank
    # Submodules that fully_shard makes FSDP2 units of their own (the root is always one); declared models get the
    # root only, since a submodule whose weights are used without calling it would never gather them.
    fsdp_units: tuple[str, ...] = ()


CORPUS = {
    model.name: model
    for model in (
        CorpusModel("bucketed_mlp", BucketedMLP, lambda: (torch.randn(8, 32),),
                    ("inp", "hidden.0", "hidden.1", "hidden.2")),
        CorpusModel("tiny_transformer", TinyTransformer, lambda: (torch.randint(0, 64, (2, 16)),), ("qkv", "proj")),
    )
}
# Models of the corpus whose weights fill more than one DDP bucket: DDPOptimizer must split their graph.
MULTI_BUCKET = ("bucketed_mlp",)
