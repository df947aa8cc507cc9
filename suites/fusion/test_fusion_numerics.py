"""Declared fused functions are not numerically more fragile compiled than eager: each on large, denormal, offset and
NaN/inf inputs and in low precision (bf16 on CPU, fp16 on CUDA), forward values judged against eager and fp64
(``suites/adversarial.py``); where eager fails too, the case skips with the reason."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
import torch

from .. import adversarial, harness, module_runs, targets
from .conftest import NO_FUSE_REASON, DeclaredFusion, _declared_fusions

# One compiled function per declared entry (dynamo compiles it once per dtype), one run per variant.
_COMPILED: dict[str, Callable[..., Any]] = {}
_OUTCOMES: dict[tuple[str, str], adversarial.Outcome] = {}


# One compiled graph per case and dtype serves every variant test; dynamo is reset around the module.
fresh_compile_state, _compiled_once_per_module = adversarial.compile_once_fixtures(_COMPILED, _OUTCOMES)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "fusion_variant" in metafunc.fixturenames:
        adversarial.parametrize_declared(metafunc, "fusion_variant", _declared_fusions(
            os.environ.get(targets.TARGETS_ENV, "")), DeclaredFusion)


@pytest.fixture
def fusion_variant() -> None:
    pytest.skip(NO_FUSE_REASON)


def test_adversarial_declared_fusion(
    fusion_variant: tuple[DeclaredFusion | targets.TargetError, str | None], device: str
) -> None:
    entry, variant = fusion_variant
    if isinstance(entry, targets.TargetError) or variant is None:
        pytest.skip(f"declared target {entry.spec!r} could not be loaded (test_declared_fusion reports why)")
    chosen = next(v for v in adversarial.variants(device) if v.name == variant)
    if (entry.test_id, variant) not in _OUTCOMES:
        compiled = _COMPILED.setdefault(entry.test_id, torch.compile(entry.fn, backend="inductor"))
        inputs = module_runs.map_tensors(entry.example_inputs, lambda t: t.to(device))
        with harness.inductor_config(fallback_random=True):  # TF32 off on CUDA: suites/conftest.py
            _OUTCOMES[entry.test_id, variant] = adversarial.run_variant(entry.fn, compiled, entry.fn, inputs, chosen)
    adversarial.check(_OUTCOMES[entry.test_id, variant], chosen)
