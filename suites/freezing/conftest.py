"""Freezing (``torch._inductor.config.freezing``) only applies to inference graphs, so every test of this suite
compiles under ``torch.no_grad()`` with freezing on, on modules in eval mode."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from .. import harness


@pytest.fixture(autouse=True)
def freezing_on() -> Iterator[None]:
    with harness.inductor_config(freezing=True), torch.no_grad():
        yield
