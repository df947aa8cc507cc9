"""Fixtures shared by every built-in suite: the device under test, fresh compile state and declared targets."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch

from . import harness, judging, targets

# Op-family coverage (coverage.json, shown on the job page) ships with the suites it measures, so a job loads it from
# whichever copy of the suites it runs (the image's or a checkout's) without naming it on the command line.
pytest_plugins = ("suites.coverage",)

DEVICE_ENV = "COMPILE_CI_DEVICE"
DEVICES = ("cpu", "cuda")


def requested_device() -> str:
    return os.environ.get(DEVICE_ENV, "").strip().lower() or "cpu"


def pytest_configure(config: pytest.Config) -> None:
    targets.add_checkout_to_sys_path()


def pytest_report_header(config: pytest.Config) -> str:
    return f"compile-ci: torch {torch.__version__}, {DEVICE_ENV}={requested_device()}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A cuda job on a host without a usable GPU is a scheduling problem, not a compile bug: skip, never fail.
    if requested_device() == "cuda" and not torch.cuda.is_available():
        skip = pytest.mark.skip(reason=f"{DEVICE_ENV}=cuda but torch.cuda.is_available() is False")
        for item in items:
            item.add_marker(skip)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # Parametrizing directly shadows the `declared_model` fixture below, which only runs when nothing is declared.
    if "declared_model" in metafunc.fixturenames:
        entries = targets.declared_models()
        if entries:
            metafunc.parametrize("declared_model", entries, ids=[entry.test_id for entry in entries])


@pytest.fixture
def declared_model() -> None:
    pytest.skip(targets.NO_MODELS_REASON)


@pytest.fixture
def device() -> str:
    """The device every tensor of the test lives on, from COMPILE_CI_DEVICE (default cpu)."""
    name = requested_device()
    if name not in DEVICES:
        pytest.fail(f"{DEVICE_ENV}={name!r} is not one of {', '.join(DEVICES)}", pytrace=False)
    return name


@pytest.fixture(autouse=True)
def fresh_compile_state() -> Iterator[None]:
    """Each test compiles from scratch (no frames or counters left by another test) with a fixed seed."""
    torch.manual_seed(0)
    with harness.fresh_compile_state():
        yield


@pytest.fixture(autouse=True)
def full_precision_on_cuda() -> Iterator[None]:
    """Plain float32 CUDA convolutions and matmuls in every test: the suites judge compiled and eager by their distance
    to a float64 reference, and TF32 (cuDNN's default for convolutions) rounds each kernel's inputs to 10 mantissa
    bits, so eager's error becomes TF32's and a compiled graph that picks another algorithm or layout lands elsewhere
    in that noise (EfficientNet-B0's training step on an H100: every parameter gradient 10 to 60 times eager's
    distance, then 0 failures with TF32 off)."""
    with judging.full_precision_on_cuda(requested_device()):
        yield
