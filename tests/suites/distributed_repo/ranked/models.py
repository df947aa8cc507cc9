"""Models that behave differently on rank 1 of a distributed run (and like rank 0 outside one): bugs the
distributed suite must report with both ranks' side of the story, and one clean model it must pass."""

from __future__ import annotations

import os
import threading

import torch
import torch.distributed as dist
from torch import nn


def rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


class Clean(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


class RankOneBreaks(Clean):
    """Graph-breaks on rank 1 only: rank 1 compiles one graph more than rank 0."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x))
        if rank() == 1:
            torch._dynamo.graph_break()
        return self.b(h)


class RankScaled(Clean):
    """Rank 1's output (so its gradient) is twice rank 0's: the averaged gradient is not the single-process one."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * (1 + rank())


class RaisesOnRankOne(Clean):
    """Raises on rank 1 before its first collective: rank 0 is left waiting in DDP's all-reduce."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if rank() == 1:
            raise RuntimeError("planted failure on rank 1")
        return super().forward(x)


class HangsOnRankOne(Clean):
    """Rank 1 never reaches its first collective and never exits: only the run's time limit ends both ranks."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if rank() == 1:
            threading.Event().wait()
        return super().forward(x)


class FailsOnceOnRankOne(Clean):
    """Raises on rank 1 the first time only (a marker file, named by RANKED_ONCE_MARKER, remembers): a flaky failure
    that an in-job rerun must see pass, which it can only if the rerun starts new ranks. The file is looked at when
    the model is built, not in forward: a file system call in forward is a graph break on rank 1 only."""

    def __init__(self) -> None:
        super().__init__()
        self.marker = os.environ.get("RANKED_ONCE_MARKER", "")
        self.fails = rank() == 1 and bool(self.marker) and not os.path.exists(self.marker)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fails:
            open(self.marker, "w").close()
            raise RuntimeError("planted one-off failure on rank 1")
        return super().forward(x)


def examples() -> list[tuple[str, type[nn.Module], tuple[torch.Tensor, ...]]]:
    inputs = (torch.randn(4, 16),)
    return [("clean", Clean, inputs), ("rank_one_breaks", RankOneBreaks, inputs), ("rank_scaled", RankScaled, inputs),
            ("raises_on_rank_one", RaisesOnRankOne, inputs), ("hangs_on_rank_one", HangsOnRankOne, inputs),
            ("fails_once_on_rank_one", FailsOnceOnRankOne, inputs)]
