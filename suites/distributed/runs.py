"""The two-rank runs of a session, one per model with every wrapper the session asks of it, and the single-process
steps they are judged against (the ``distributed_runs`` fixture)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from suites import targets
from suites.distributed.launch import RankReport, run_ranks
from suites.distributed.steps import WORLD_SIZE, train, trainable
from suites.module_runs import to_fp64

WRAPPERS = ("ddp", "ddp_optimizer", "fsdp2")


def model_key(params: dict[str, Any]) -> tuple[str, str] | None:
    """Which model a test's parameters name: ("corpus", name) or ("declared", name)."""
    if "corpus_model" in params:
        return "corpus", str(params["corpus_model"])
    entry = params.get("declared_model")
    return ("declared", entry.name) if isinstance(entry, targets.DeclaredModel) else None


class DistributedRuns:
    """Two-rank runs, one per model with every wrapper this session asks of it (ranks start once, not per test),
    and the single-process steps they are judged against."""

    def __init__(self, items: list[pytest.Item], device: str, workdir: Path) -> None:
        self.device, self.workdir = device, workdir
        self.collected: dict[tuple[str, str], set[str]] = {}
        for item in items:
            params = getattr(getattr(item, "callspec", None), "params", {})
            key = model_key(params)
            if key is not None and params.get("wrapper") in WRAPPERS:
                self.collected.setdefault(key, set()).add(params["wrapper"])
        self._runs: dict[tuple[str, str], tuple[set[str], list[RankReport]]] = {}
        self._references: dict[tuple[str, str], tuple[Any, Any, Callable[[], Any]] | None] = {}
        self._launches = 0

    def reports(self, source: str, name: str, wrappers: list[str], fresh: bool = False) -> list[RankReport]:
        """The ranks' reports for ``wrappers`` of a model; ``fresh``: from new ranks, for these wrappers only (an
        in-job rerun of a failed test must really run again, or a flaky failure would look like a broken one)."""
        key = (source, name)
        ran, reports = self._runs.get(key, (set(), []))
        if fresh or not set(wrappers) <= ran:
            wanted = [w for w in WRAPPERS if w in {*wrappers, *([] if fresh else self.collected.get(key, ()))}]
            self._launches += 1
            workdir = self.workdir / f"{source}-{targets.readable_id(name)}-{self._launches}"
            ran, reports = set(wanted), run_ranks(source, name, wanted, self.device, workdir)
            if not fresh:
                self._runs[key] = ran, reports
        return reports

    def single_process(self, source: str, name: str, factory: Callable[[], torch.nn.Module],
                       inputs: tuple[Any, ...]) -> tuple[Any, Any, Callable[[], Any]] | None:
        """(fp32, fp64) single-process runs of every rank's steps, and the fp64 run again from the same start (the
        judgement measures its rounding noise where it needs it); None when the model has nothing to train."""
        key = (source, name)
        if key not in self._references:
            device = "cuda:0" if self.device == "cuda" else "cpu"
            torch.manual_seed(0)
            module = factory().to(device)
            start64 = copy.deepcopy(module).to(torch.float64)
            inputs = tuple(x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs)

            def fp64(start: torch.nn.Module = start64, given: tuple[Any, ...] = to_fp64(inputs)) -> Any:
                twin = copy.deepcopy(start)
                return train(twin, twin, given, range(WORLD_SIZE))

            self._references[key] = (
                (train(module, module, inputs, range(WORLD_SIZE)), fp64(), fp64) if trainable(module) else None)
        return self._references[key]
