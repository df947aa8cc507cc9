"""Planted bug: inductor decomposes softmax, log-softmax and logsumexp without subtracting the row maximum first.

Load with ``-p tests.suites.planted.softmax_without_max_shift``. ``exp(x) / sum(exp(x))`` equals eager's
``exp(x - max) / sum(exp(x - max))`` on well-scaled inputs, but ``exp`` overflows to inf once a logit passes about 88
(float32), so large logits give NaN (inf / inf) or inf: the classic lowering that forgets the max shift. Installed in
inductor's decomposition table, so every graph inductor compiles uses it (cross-entropy and attention included).
"""

from __future__ import annotations

import pytest

from . import disable_compile_caches


def pytest_configure(config: pytest.Config) -> None:
    import torch
    from torch._inductor import decomposition

    disable_compile_caches()
    aten = torch.ops.aten

    def upcast(x: torch.Tensor) -> torch.Tensor:  # eager computes half types in float32 too
        return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x

    def softmax(x: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
        e = torch.exp(upcast(x))
        out = e / e.sum(dim, keepdim=True)
        return out if half_to_float else out.to(x.dtype)

    def log_softmax(x: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
        wide = upcast(x)
        out = wide - torch.log(torch.exp(wide).sum(dim, keepdim=True))
        return out if half_to_float else out.to(x.dtype)

    def logsumexp(x: torch.Tensor, dim: list[int], keepdim: bool = False) -> torch.Tensor:
        return torch.log(torch.exp(upcast(x)).sum(dim, keepdim=keepdim)).to(x.dtype)

    decomposition.decompositions[aten._softmax.default] = softmax
    decomposition.decompositions[aten._log_softmax.default] = log_softmax
    decomposition.decompositions[aten.logsumexp.default] = logsumexp
