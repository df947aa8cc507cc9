"""Planted bug (pytest plugin): inductor normalises with the unbiased variance (Bessel's correction) where the
population variance is meant.

Load with ``-p tests.suites.planted.batch_norm_unbiased_variance``. Installed as inductor's decomposition of
``aten.var_mean``, which its BatchNorm and LayerNorm decompositions call with ``correction=0``: every such variance
becomes sum((x - mean)²) / (n - 1). With n values per channel that scales the normalised values by sqrt((n-1)/n):
a 29 % error at n = 2 (a training-mode BatchNorm on a batch of 2 with a 1x1 feature map), 0.1 % at n = 512 — the
kind of bug a derived tolerance for batch statistics must still catch.
"""

from __future__ import annotations

import math

import pytest

from . import disable_compile_caches


def pytest_configure(config: pytest.Config) -> None:
    import torch
    from torch._inductor import decomposition

    disable_compile_caches()

    def var_mean_bessel(x: torch.Tensor, dim: list[int] | None = None, *, correction: float | None = None,
                        keepdim: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        dims = list(range(x.dim())) if dim is None else [d % max(x.dim(), 1) for d in dim]
        count = math.prod(x.shape[d] for d in dims)
        mean = x.mean(dims, keepdim=True)
        wanted = 1 if correction is None else correction
        divisor = max(count - (1 if wanted == 0 else wanted), 1)  # the bug: 0 treated as 1
        variance = (x - mean).square().sum(dims, keepdim=True) / divisor
        if not keepdim:
            variance, mean = variance.squeeze(dims), mean.squeeze(dims)
        return variance, mean

    decomposition.decompositions[torch.ops.aten.var_mean.correction] = var_mean_bessel
