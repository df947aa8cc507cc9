"""The layers where numerical fragility lives (issue 15), as one module whose forward returns each layer's output by
name: exp-based reductions (softmax, log-softmax, logsumexp, cross-entropy), normalisations (LayerNorm, RMSNorm,
BatchNorm statistics), attention (``scaled_dot_product_attention`` and a hand-written one) and GELU/SiLU.

One module, so the whole corpus is one compiled graph per dtype: every adversarial variant reuses it (the values
change, never the shapes or dtypes, so dynamo does not recompile), and each layer is still judged on its own output.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

# x is (batch 2, heads 3, sequence 5, features 8): 3 BatchNorm channels of 80 values, rows of 8 for the row-wise
# reductions (softmax & co. over the feature axis), 5x5 attention scores per head. Sizes stay off powers of two
# where they can so vectorised loops also run their scalar tails.
SHAPE = (2, 3, 5, 8)
CLASSES = SHAPE[-1]


class FragileLayers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        features = SHAPE[-1]
        self.layer_norm = nn.LayerNorm(features)
        # An explicit eps: the default (the dtype's machine epsilon) would make the fp64 reference another function.
        self.rms_norm = nn.RMSNorm(features, eps=1e-6)
        with torch.no_grad():  # not the identity init, so a lowering that drops the affine part shows
            for norm in (self.layer_norm, self.rms_norm):
                norm.weight.uniform_(0.5, 1.5)
            self.layer_norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> dict[str, torch.Tensor]:
        rows = x.reshape(-1, CLASSES)
        # Keys reversed along the sequence so that scores are not just each query with itself.
        q, k, v = x, x.flip(-2), x
        scores = q @ k.transpose(-2, -1) / math.sqrt(x.shape[-1])
        return {
            "softmax": torch.softmax(x, dim=-1),
            "log_softmax": torch.log_softmax(x, dim=-1),
            "logsumexp": torch.logsumexp(x, dim=-1),
            "cross_entropy": F.cross_entropy(rows, target, reduction="none"),
            "layer_norm": self.layer_norm(x),
            "rms_norm": self.rms_norm(x),
            # Training-mode statistics of the batch itself (no running buffers): the variance is what breaks.
            "batch_norm": F.batch_norm(x, None, None, training=True),
            "sdpa": F.scaled_dot_product_attention(q, k, v),
            "attention": torch.softmax(scores, dim=-1) @ v,
            "gelu": F.gelu(x),
            "gelu_tanh": F.gelu(x, approximate="tanh"),
            "silu": F.silu(x),
        }


LAYERS = (
    "softmax", "log_softmax", "logsumexp", "cross_entropy", "layer_norm", "rms_norm", "batch_norm", "sdpa",
    "attention", "gelu", "gelu_tanh", "silu",
)


def example_inputs(device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Well-scaled inputs the adversarial variants rewrite: standard-normal x and class indices for cross-entropy."""
    x = torch.randn(SHAPE, device=device)
    target = torch.randint(0, CLASSES, (x.numel() // CLASSES,), device=device)
    return x, target
