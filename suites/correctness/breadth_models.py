"""Tiny instances of the architectures torch.compile users ship, each chosen for op families the rest of the corpus
never compiles (issue 20): residual and UNet vision blocks (pooling, upsampling, padding modes, transposed convs),
a transformer block with a KV cache, recurrent cells, a mixture of experts with top-k routing, a recommendation
model with EmbeddingBag, a GNN layer with index_add/scatter_reduce, scans with an integer/bit path, and the
activations and losses models train with.

Sizes are a few elements per dimension: enough for duplicates, ties-free reductions and uneven tiles, cheap to
compile. Every module returns a dict, so a failing leaf is named (``output['gnn_max']``) in the judgement.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class ResNetBlock(nn.Module):
    # A strided residual block with a projection shortcut: BatchNorm in training mode (batch statistics and running
    # buffers), a 1x1 stride-2 conv on the shortcut, adaptive average and max pooling to a head. One BatchNorm:
    # a second would compile the same kernels again (each costs a C++ compile, the suites' cold time).
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 3, stride=2, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(6)
        self.conv2 = nn.Conv2d(6, 6, 3, padding=1)
        self.shortcut = nn.Conv2d(3, 6, 1, stride=2, bias=False)
        self.head = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.conv2(y) + self.shortcut(x))
        return {"logits": self.head(F.adaptive_avg_pool2d(y, 1).flatten(1)),
                "pooled_max": F.adaptive_max_pool2d(y, 2)}


class UNetBlock(nn.Module):
    # Down (max pool with indices, average pool), up (nearest and bilinear upsampling, a stride-2 transposed conv),
    # a skip connection by concatenation, GroupNorm + SiLU, reflect and circular padding (replicate padding is left
    # out: its compiled backward fails a fake-tensor stride check in torch 2.13 before any numerics are judged).
    def __init__(self) -> None:
        super().__init__()
        self.down = nn.Conv2d(2, 4, 3, padding=1)
        self.norm = nn.GroupNorm(2, 4)
        self.mid = nn.Conv2d(4, 4, 3, padding=1, padding_mode="reflect")
        self.up = nn.ConvTranspose2d(4, 4, 2, stride=2)
        self.out = nn.Conv2d(10, 2, 3)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        skip = F.silu(self.norm(self.down(x)))
        pooled, indices = F.max_pool2d(skip, 2, return_indices=True)
        y = self.mid(pooled + F.avg_pool2d(skip, 2))
        unpooled = F.max_unpool2d(y, indices, 2, output_size=skip.shape[-2:])
        up = self.up(y) + F.interpolate(y, scale_factor=2.0, mode="nearest") + unpooled
        joined = torch.cat([up, skip, F.interpolate(x, size=skip.shape[-2:], mode="bilinear", align_corners=False)], 1)
        out = self.out(F.pad(joined, (1, 1, 1, 1), mode="reflect"))
        circular = F.pad(out, (1, 2, 0, 1), mode="circular").repeat(1, 2, 1, 1)
        return {"out": out, "circular": F.pixel_shuffle(circular, 1),
                "hardtanh": F.hardtanh(F.pixel_unshuffle(up, 2), -0.5, 0.5)}


class TransformerWithKVCache(nn.Module):
    # One decoder block decoding 2 new tokens after 3 cached ones: the cache is written with index_copy at the
    # new positions, attention is causal over cache + new (scaled_dot_product_attention with a boolean mask),
    # a pre-norm LayerNorm before attention (one: a second compiles the same kernels again), rotary-free learned
    # positions, a tanh-GELU MLP and a log-softmax head.
    heads, dim, cached, new = 2, 8, 3, 2

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(self.dim, 3 * self.dim)
        self.proj = nn.Linear(self.dim, self.dim)
        self.norm1 = nn.LayerNorm(self.dim)
        self.mlp = nn.Sequential(nn.Linear(self.dim, 16), nn.GELU(approximate="tanh"), nn.Linear(16, self.dim))
        self.positions = nn.Embedding(self.cached + self.new, self.dim)

    def forward(self, x: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> dict[str, torch.Tensor]:
        batch, total = x.shape[0], self.cached + self.new
        where = torch.arange(self.cached, total, device=x.device)
        h = x + self.positions(where)
        q, k, v = self.qkv(self.norm1(h)).chunk(3, dim=-1)
        split = [batch, self.new, self.heads, self.dim // self.heads]
        q, k, v = (t.reshape(split).transpose(1, 2) for t in (q, k, v))
        keys = k_cache.index_copy(2, where, k)
        values = v_cache.index_copy(2, where, v)
        mask = torch.ones(self.new, total, dtype=torch.bool, device=x.device).tril(diagonal=self.cached)
        attended = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
        h = h + self.proj(attended.transpose(1, 2).reshape(batch, self.new, self.dim))
        h = h + self.mlp(h)
        return {"hidden": h, "log_probs": F.log_softmax(h, dim=-1), "keys": keys, "values": values}


class RecurrentCells(nn.Module):
    # A GRU cell unrolled over 2 steps, then an LSTM cell on its last state (dynamo traces cells; whole nn.GRU/LSTM
    # modules run eager). One LSTM step: a second compiles the same gate kernels again.
    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRUCell(3, 5)
        self.lstm = nn.LSTMCell(5, 4)

    def forward(self, xs: torch.Tensor) -> dict[str, torch.Tensor]:
        h = xs.new_zeros(xs.shape[1], 5)
        outputs = []
        for x in xs.unbind(0):
            h = self.gru(x, h)
            outputs.append(h)
        hidden, cell = self.lstm(h)
        return {"sequence": torch.stack(outputs), "hidden": hidden, "cell": cell}


class MixtureOfExperts(nn.Module):
    # 4 experts, top-2 routing: softmax router, topk, every expert computed densely (no data-dependent shapes),
    # the chosen outputs gathered and mixed, per-expert load counted with scatter_add for the balancing loss.
    experts, dim, hidden, k = 4, 6, 8, 2

    def __init__(self) -> None:
        super().__init__()
        self.router = nn.Linear(self.dim, self.experts, bias=False)
        self.w_in = nn.Parameter(torch.randn(self.experts, self.dim, self.hidden) / math.sqrt(self.dim))
        self.w_out = nn.Parameter(torch.randn(self.experts, self.hidden, self.dim) / math.sqrt(self.hidden))

    def forward(self, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
        probs = self.router(tokens).softmax(-1)
        weights, chosen = probs.topk(self.k, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        hidden = F.relu(torch.einsum("td,edh->teh", tokens, self.w_in))
        expert_out = torch.einsum("teh,ehd->ted", hidden, self.w_out)
        picked = expert_out.gather(1, chosen.unsqueeze(-1).expand(-1, -1, self.dim))
        load = torch.zeros(self.experts, device=tokens.device).scatter_add(
            0, chosen.flatten(), torch.ones(chosen.numel(), device=tokens.device))
        balance = (load / chosen.numel() * probs.mean(0)).sum() * self.experts
        return {"out": (picked * weights.unsqueeze(-1)).sum(1), "balance": balance, "chosen": chosen,
                "sorted": probs.sort(dim=0).values}


class Recommender(nn.Module):
    # DLRM-style: sparse features through EmbeddingBag (sum with per-sample weights and max, bags given by
    # offsets with a repeated index), a padded Embedding, pairwise dot interactions (bmm + upper triangle), an MLP.
    def __init__(self) -> None:
        super().__init__()
        self.bag_sum = nn.EmbeddingBag(10, 4, mode="sum")
        self.bag_max = nn.EmbeddingBag(10, 4, mode="max")
        self.item = nn.Embedding(7, 4, padding_idx=0)
        self.dense = nn.Linear(3, 4)
        self.top = nn.Sequential(nn.Linear(4 + 6, 6), nn.ReLU(), nn.Linear(6, 1))

    def forward(self, dense: torch.Tensor, ids: torch.Tensor, offsets: torch.Tensor, weights: torch.Tensor,
                items: torch.Tensor) -> dict[str, torch.Tensor]:
        features = torch.stack([
            F.relu(self.dense(dense)),
            self.bag_sum(ids, offsets, per_sample_weights=weights),
            self.bag_max(ids, offsets),
            self.item(items),
        ], dim=1)
        dots = torch.bmm(features, features.transpose(1, 2))
        rows, cols = torch.triu_indices(4, 4, offset=1, device=dense.device)
        logits = self.top(torch.cat([features[:, 0], dots[:, rows, cols]], dim=1)).squeeze(-1)
        return {"logits": logits, "probability": torch.sigmoid(logits)}


class GraphConvolution(nn.Module):
    # Message passing over an edge list with repeated destinations: gather sources (index_select), sum and mean
    # by index_add, max by scatter_reduce(amax, include_self=False), a degree count, a linear update.
    def __init__(self) -> None:
        super().__init__()
        self.message = nn.Linear(4, 4)
        self.update = nn.Linear(12, 4)

    def forward(self, x: torch.Tensor, edges: torch.Tensor) -> dict[str, torch.Tensor]:
        src, dst = edges[0], edges[1]
        messages = torch.tanh(self.message(x.index_select(0, src)))
        summed = torch.zeros_like(x).index_add(0, dst, messages)
        degree = x.new_zeros(x.shape[0]).index_add(0, dst, torch.ones_like(dst, dtype=x.dtype))
        mean = summed / degree.clamp(min=1).unsqueeze(-1)
        largest = torch.zeros_like(x).scatter_reduce(0, dst.unsqueeze(-1).expand_as(messages), messages, "amax",
                                                    include_self=False)
        product = torch.ones_like(x).scatter_reduce(0, dst.unsqueeze(-1).expand_as(messages), messages, "prod")
        out = self.update(torch.cat([x, mean, largest], dim=-1))
        return {"out": F.leaky_relu(out, 0.1), "gnn_max": largest, "gnn_prod": product, "degree": degree}


class ScansAndBits(nn.Module):
    # Prefix scans in float (sum, product, log-sum-exp, running max/min) with their backward, and an integer path
    # models use for hashing and bucketing ids: multiply, shifts, and/or/xor/not, floor division, remainder,
    # an int64 cumsum, bucketize and searchsorted. Integer outputs are judged exactly.
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, 6))

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        y = x * self.scale
        hashed = ((ids * 40503) ^ (ids >> 3)) & 0x3FFF
        mixed = (hashed << 2) | (~ids & 7)
        boundaries = torch.tensor([2, 5, 9, 17], device=x.device)
        return {
            "cumsum": y.cumsum(-1), "cumprod": y.cumprod(-1), "logcumsumexp": y.logcumsumexp(-1),
            "cummax": y.cummax(-1).values, "cummin": y.cummin(0).values,
            "hash": hashed, "mixed": mixed, "floordiv": torch.div(mixed, 7, rounding_mode="floor"),
            "remainder": torch.remainder(mixed - 40, 9), "fmod": torch.fmod(mixed - 40, 9),
            "int_cumsum": hashed.cumsum(-1), "bucket": torch.bucketize(ids, boundaries),
            "searchsorted": torch.searchsorted(boundaries, ids % 20, right=True),
        }
