"""The distributed suite's fixtures: whether this job can run two ranks, and the session's runs (``runs.py``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from suites.distributed.runs import DistributedRuns
from suites.distributed.steps import WORLD_SIZE

GPU_REASON = ("the distributed suite needs {world} GPUs and this job sees {seen} (a worker on the cuda2 queue "
              "with COMPILE_CI_GPUS listing two GPUs runs it)")


def _own(item: pytest.Item) -> bool:
    return Path(str(item.path)).resolve().is_relative_to(Path(__file__).resolve().parent)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = None
    if not torch.distributed.is_available():
        reason = f"torch {torch.__version__} was built without torch.distributed"
    elif os.environ.get("COMPILE_CI_DEVICE", "").strip().lower() == "cuda" and torch.cuda.is_available():
        seen = torch.cuda.device_count()
        reason = GPU_REASON.format(world=WORLD_SIZE, seen=seen) if seen < WORLD_SIZE else None
    if reason:
        for item in items:
            if _own(item):
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def distributed_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> DistributedRuns:
    device = os.environ.get("COMPILE_CI_DEVICE", "").strip().lower() or "cpu"
    return DistributedRuns(request.session.items, device, tmp_path_factory.mktemp("distributed"))
