"""Parametrize the fusion suite over the functions a repository declares under ``[targets] fuse``."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from .. import targets

NO_FUSE_REASON = "no fuse callables declared in .compile-ci.toml [targets]"


@dataclass(frozen=True)
class DeclaredFusion:
    """One ``(name, fn, example_inputs)`` entry from a declared ``fuse`` callable."""

    name: str
    spec: str
    fn: Callable[..., Any]
    example_inputs: tuple[Any, ...]

    @property
    def test_id(self) -> str:
        return targets.readable_id(self.name)


def _entries_from_spec(spec: str) -> list[DeclaredFusion | targets.TargetError]:
    try:
        examples = targets.resolve_spec(spec)
        torch.manual_seed(0)  # example inputs drawn at random are the same on every run
        entries = list(examples())
    except ValueError as exc:
        return [targets.TargetError(spec, str(exc))]
    except (Exception, SystemExit) as exc:
        return [targets.TargetError(spec, f"calling it failed: {type(exc).__name__}: {exc}")]
    loaded: list[DeclaredFusion | targets.TargetError] = []
    for index, entry in enumerate(entries):
        ok = isinstance(entry, tuple | list) and len(entry) == 3
        name, fn, inputs = entry if ok else (None, None, None)
        if not (isinstance(name, str) and callable(fn) and isinstance(inputs, tuple | list)):
            problem = f"entry {index} must be (name: str, fn: callable, example_inputs: tuple), got {entry!r:.200}"
            loaded.append(targets.TargetError(spec, problem, id_hint=f"{spec}[{index}]"))
        else:
            loaded.append(DeclaredFusion(name, spec, fn, tuple(inputs)))
    return loaded


@functools.cache
def _declared_fusions(raw: str) -> tuple[DeclaredFusion | targets.TargetError, ...]:
    specs = targets.declared_specs("fuse", raw)
    if isinstance(specs, targets.TargetError):
        return (specs,)
    return tuple(entry for spec in specs for entry in _entries_from_spec(spec))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "declared_fusion" in metafunc.fixturenames:
        entries = _declared_fusions(os.environ.get(targets.TARGETS_ENV, ""))
        if entries:
            metafunc.parametrize("declared_fusion", entries, ids=[entry.test_id for entry in entries])


@pytest.fixture
def declared_fusion() -> None:
    pytest.skip(NO_FUSE_REASON)
