"""Planted bug: inductor computes variance as E[x^2] - E[x]^2 (one pass, catastrophic cancellation).

Load with ``-p tests.suites.planted.variance_by_cancellation``. Installed as inductor's decomposition of
``aten.var_mean``, which the LayerNorm and BatchNorm decompositions call: on well-scaled inputs the two formulas agree
to float32 rounding, but on inputs with mean 1e4 and spread 1e-2, E[x^2] is about 1e8 (one unit in the last place is
8) while the true variance is 1e-4, so the difference is rounding noise, often negative (NaN after rsqrt).
"""

from __future__ import annotations

import math

import pytest

from . import disable_compile_caches


def pytest_configure(config: pytest.Config) -> None:
    import torch
    from torch._inductor import decomposition

    disable_compile_caches()

    def var_mean_one_pass(x: torch.Tensor, dim: list[int] | None = None, *, correction: float | None = None,
                          keepdim: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        dims = list(range(x.dim())) if dim is None else [d % max(x.dim(), 1) for d in dim]
        count = math.prod(x.shape[d] for d in dims)
        mean = x.mean(dims, keepdim=True)
        variance = (x * x).mean(dims, keepdim=True) - mean * mean
        variance = variance * (count / max(count - (1 if correction is None else correction), 1))
        if not keepdim:
            variance, mean = variance.squeeze(dims), mean.squeeze(dims)
        return variance, mean

    decomposition.decompositions[torch.ops.aten.var_mean.correction] = var_mean_one_pass
