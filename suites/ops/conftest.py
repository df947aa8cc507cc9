"""The ops suite's session: torch's compiler surface taken before the repository's code, the repository's compiler
targets installed, then one test per planned (op, dtype) case."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from ..conftest import requested_device
from . import internals, known_failures, plan

# At import, as an initial conftest: before any plugin's pytest_configure and before the repository's code runs.
plan.take_baseline()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" in metafunc.fixturenames:
        cases = _plan().run
        metafunc.parametrize("case", cases, ids=[case.test_id for case in cases])
    if "compiler_target" in metafunc.fixturenames:
        entries = _plan().compiler_targets
        if entries:
            metafunc.parametrize("compiler_target", entries, ids=[entry.test_id for entry in entries])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """No case planned (nothing the change touches): no op test at all, rather than pytest's skipped [NOTSET]."""
    empty = [item for item in items if item.name == "test_op_matches_eager[NOTSET]"]
    if empty:
        config.hook.pytest_deselected(items=empty)
        items[:] = [item for item in items if item not in empty]


def _plan() -> plan.Plan:
    device = requested_device()
    if device == "cuda" and not torch.cuda.is_available():
        return plan.Plan(device, problem="COMPILE_CI_DEVICE=cuda but torch.cuda.is_available() is False")
    return plan.plan(device)


@pytest.fixture(autouse=True)
def sweep_settings() -> Iterator[None]:
    with internals.sweep_config():
        yield


@pytest.fixture
def sweep_plan() -> plan.Plan:
    return _plan()


@pytest.fixture
def compiler_target() -> None:
    pytest.skip(f"no compiler declared in .compile-ci.toml [targets] {plan.COMPILER_KIND}")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    planned = _plan()
    write = terminalreporter.write_line
    terminalreporter.section("compile-ci ops sweep")
    if planned.problem:
        write(f"nothing planned: {planned.problem}")
        return
    aim = planned.aim
    scope = "every op" if aim is not None and aim.everything else "the ops the change touches"
    write(f"scope: {scope}; {len(planned.run)} cases run, {planned.not_aimed} not touched, "
          f"{planned.other_shards} in other shards, {sum(map(len, planned.not_compiled.values()))} not compiled "
          f"by inductor; planned in {planned.seconds} s")
    for reason in aim.reasons if aim is not None else ():
        write(f"  changed: {reason}")
    listed = known_failures.listed(planned.device)
    write(f"known upstream failures listed for {planned.device}, torch {torch.__version__}: {len(listed)}")
    for known in listed:
        write(f"  {known.describe()}")
