"""What differs between two runs of the same code, with real torch.compile through the capture plugin: a cold run,
then a warm one (the same inductor cache) with the tests in the other order. The same code compares unchanged
(the AOT counters moved; a warm AOT-autograd cache writes each backward next to its forward); a changed operation
is still a change; the compile times of the two runs are not compared, their dynamo times are."""

from __future__ import annotations

import pytest

from service.compare import codediff
from service.compare.inputs import read_codes
from service.compare.ledger import ledger_of, times_comparable
from service.compare.ledger_deltas import deltas_of
from tests.suites.repo_run import RepoRun, run_repo_tests

TESTS = '''
import os

import torch
from torch import nn

OP = torch.cos if os.environ.get("NOISE_VARIANT") == "cos" else torch.sin


def test_forward():
    torch._dynamo.reset()
    torch.compile(lambda x, y: (torch.sin(x) + y).relu() * 2)(torch.randn(8, 16), torch.randn(8, 16))


def test_variant():
    torch._dynamo.reset()
    torch.compile(lambda x: OP(x) * 3)(torch.randn(8, 16))


def test_training_with_a_graph_break():
    torch._dynamo.reset()
    torch.manual_seed(0)
    first, second = nn.Linear(8, 8), nn.Linear(8, 4)

    def step(x):
        h = torch.tanh(first(x))
        torch._dynamo.graph_break()
        return torch.sigmoid(second(h))

    torch.compile(step)(torch.randn(4, 8)).sum().backward()
'''
CONFTEST = '''
import os


def pytest_collection_modifyitems(items):
    if os.environ.get("NOISE_REVERSED"):
        items.reverse()
'''
NAMES = ("test_forward", "test_variant", "test_training_with_a_graph_break")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[RepoRun, RepoRun]:
    """(cold, warm in the other order with test_variant's sin changed to cos)."""
    root = tmp_path_factory.mktemp("noise")
    (root / "checkout" / "tests").mkdir(parents=True)
    (root / "checkout" / "tests" / "test_noise.py").write_text(TESTS)
    (root / "checkout" / "tests" / "conftest.py").write_text(CONFTEST)
    cache = {"TORCHINDUCTOR_CACHE_DIR": str(root / "inductor-cache")}
    cold = run_repo_tests(root / "checkout", root / "cold", cache)
    assert cold.returncode == 0, cold.describe()
    warm = run_repo_tests(root / "checkout", root / "warm", {**cache, "NOISE_REVERSED": "1", "NOISE_VARIANT": "cos"})
    assert warm.returncode == 0, warm.describe()
    return cold, warm


def _codes(run: RepoRun, name: str) -> list[str]:
    return read_codes(run.test_dir(f"tests/test_noise.py::{name}"))


def test_the_same_code_cold_and_then_warm_in_another_order_is_unchanged(runs: tuple[RepoRun, RepoRun]) -> None:
    cold, warm = runs
    for name in ("test_forward", "test_training_with_a_graph_break"):
        before, after = _codes(cold, name), _codes(warm, name)
        assert before, name
        assert not codediff.changed(before, after), name
        pairs = codediff.match_graphs(before, after)  # the diff page: every graph paired with its identical twin
        assert all(b is not None and h is not None and codediff.unified(before[b], after[h]) == []
                   for b, h in pairs), (name, pairs)
    # The scenario the by-file-index comparison got wrong: two forwards and their backwards, another order warm.
    before, after = _codes(cold, "test_training_with_a_graph_break"), _codes(warm, "test_training_with_a_graph_break")
    assert len(before) == 4 and [codediff.normalise(c) for c in before] != [codediff.normalise(c) for c in after]


def test_a_changed_operation_is_still_a_change(runs: tuple[RepoRun, RepoRun]) -> None:
    cold, warm = runs
    before, after = _codes(cold, "test_variant"), _codes(warm, "test_variant")
    assert codediff.changed(before, after)
    diff = codediff.unified(before[0], after[0])
    assert any("sin" in line for line in diff if line.startswith("-")) and any("cos" in line for line in diff
                                                                               if line.startswith("+"))


def test_cold_and_warm_compile_times_are_not_compared(runs: tuple[RepoRun, RepoRun]) -> None:
    cold, warm = runs
    for name in ("test_forward", "test_training_with_a_graph_break"):
        base = ledger_of(cold.metrics(f"tests/test_noise.py::{name}"))
        head = ledger_of(warm.metrics(f"tests/test_noise.py::{name}"))
        assert (base.cache, head.cache) == ("cold", "warm"), name
        assert not times_comparable(base, head)
        assert base.dynamo_time_s is not None and head.dynamo_time_s is not None
        figures = {d.figure for d in deltas_of(name, base, head, code_changed=False)}
        assert not figures & {"compile_time_s", "code_bytes", "kernels_generated"}, (name, figures)
