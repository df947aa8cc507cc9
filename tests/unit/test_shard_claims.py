"""Shards that take their tests while they run (suites/claiming.py, runners/grants.py, service/store/claims.py):
real pytest processes, their requests read from what they print by the runner's tap, answered from real Redis.

What a user would notice: every collected test runs exactly once over the shards, whichever shard starts first or
late, a model's tests stay on one shard, a shard that comes after the others took everything runs nothing and
says so, a retried shard runs again what it had taken, and what a job prints cannot take more than its own tests.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from runners.grants import UNANSWERED, GrantChannel, GrantTap
from service.jobs.shard_merge import untaken_of
from service.planning.selection import SelectionFile, read_selection, shard_env
from service.store.claims import Claims
from suites.shard_plan import GRANTS_ENV

ROOT = Path(__file__).resolve().parents[2]
SUITE = '''
from dataclasses import dataclass
import pytest


@dataclass(frozen=True)
class Declared:
    name: str
    spec: str


MODELS = [Declared(name, f"zoo.{name}:examples") for name in ("resnet", "vit", "bert", "gpt")]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_declared_model(model):
    pass


@pytest.mark.parametrize("variant", [(m, v) for m in MODELS for v in ("bf16", "fp32")],
                         ids=lambda pair: f"{pair[0].name}-{pair[1]}")
def test_adversarial_declared_model(variant):
    pass


@pytest.mark.parametrize("size", range(8))
def test_corpus(size):
    assert size != 5, "size 5 fails in this commit"
'''
TESTS = 4 * 3 + 8


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    (tmp_path / "test_zoo.py").write_text(textwrap.dedent(SUITE))
    return tmp_path


class Shard:
    """One shard's process, its output read through the runner's tap like a LocalRunner's log pump."""

    def __init__(self, suite: Path, claims: Claims, attempt: str, index: int, count: int, name: str) -> None:
        self.out = suite / name
        self.out.mkdir()
        grants = suite / f"{name}-grants"
        grants.mkdir()
        self.log = bytearray()
        sink = type("Sink", (), {"write": lambda _self, chunk: self.log.extend(chunk)})()
        self.tap = GrantTap(sink, GrantChannel(grants, lambda r, u: claims.grant_unit(attempt, index, r, u)))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-p", "suites.plugin",
             f"--junitxml={self.out / 'junit.xml'}", str(suite / "test_zoo.py")],
            env={**os.environ, "PYTHONPATH": str(ROOT), "COMPILE_CI_OUTPUT_DIR": str(self.out),
                 GRANTS_ENV: str(grants), **shard_env(index, count, {}, dynamic=True)},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=suite)
        self.pump = threading.Thread(target=self._pump)
        self.pump.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        while chunk := self.proc.stdout.read1(4096):  # type: ignore[attr-defined]
            self.tap.write(chunk)

    def wait(self) -> tuple[int, list[str]]:
        code = self.proc.wait(timeout=120)
        self.pump.join(timeout=30)
        ran = [case.get("name", "") for case in ET.parse(self.out / "junit.xml").getroot().iter("testcase")]
        return code, ran


def _model(name: str) -> str:
    return name.split("[")[1].split("-")[0].rstrip("]") if "declared" in name else name


def test_every_test_runs_once_whichever_shard_starts_first(suite: Path, redis_url: str) -> None:
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    claims = Claims(redis_url, 3600)
    order = list(range(3))
    rng.shuffle(order)
    first, late = order[:2], order[2]
    shards = {k: Shard(suite, claims, "job1:1", k, 3, f"shard{k}") for k in first}
    results = {k: shards[k].wait() for k in first}
    shards[late] = Shard(suite, claims, "job1:1", late, 3, f"shard{late}")  # after the others took every test
    results[late] = shards[late].wait()
    ran = [name for _code, names in results.values() for name in names]
    assert sorted(ran) == sorted(set(ran)) and len(ran) == TESTS, (seed, results)
    assert results[late] == (0, []), (seed, shards[late].log.decode()[-2000:])  # nothing left is not a failure
    # Exactly one test fails in the whole job: its shard says so, the others pass.
    assert sorted(code for code, _names in results.values()) == [0, 0, 1]
    where = {name: k for k, (_code, names) in results.items() for name in names}
    for model in ("resnet", "vit", "bert", "gpt"):  # a model's three tests, compiled on one shard
        assert len({k for name, k in where.items() if _model(name) == model}) == 1, (seed, where)
    selections = [read_selection(shards[k].out) for k in range(3)]
    assert all(s.found and len(s.order) == TESTS for s in selections)
    assert sorted(n for s in selections for n in s.taken or ()) == sorted(selections[0].order)
    assert untaken_of(selections) == ""
    # The progress each shard published counts what it took, not the whole job.
    progress = [json.loads((shards[k].out / "progress.json").read_text()) for k in first]
    assert sum(p["total"] for p in progress) == TESTS and all(p["done"] == p["total"] for p in progress)

    # The first shard's attempt retried (its worker lost): it runs again what it took, in the same order, and no more.
    again = Shard(suite, claims, "job1:1", first[0], 3, "retried")
    assert again.wait()[1] == results[first[0]][1]


def test_a_test_no_shard_took_fails_the_job_by_name() -> None:
    order = [f"t.py::test_{i}" for i in range(4)]
    told = [SelectionFile(order, [], 0, 2, True, order[:1]), SelectionFile(order, [], 1, 2, True, order[2:])]
    assert "1 of the 4 collected tests were taken by no shard (e.g. t.py::test_1)" in untaken_of(told)
    # A runner image from before shards took their tests ignores "dynamic" and runs its share by count: its
    # selection.json says nothing of what it took, and the job is judged by its results as before.
    old_image = [SelectionFile(order, [], 0, 2, True, None), SelectionFile(order, [], 1, 2, True, None)]
    assert untaken_of(old_image) == ""


class Asked:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def __call__(self, request: int, units: int) -> int:
        self.calls.append((request, units))
        return request


def test_what_a_job_prints_asks_only_for_its_next_unit(tmp_path: Path) -> None:
    asked, log = Asked(), bytearray()
    sink = type("Sink", (), {"write": lambda _self, chunk: log.extend(chunk)})()
    tap = GrantTap(sink, GrantChannel(tmp_path, asked))
    forged = [
        b"compile-ci-claim 5 10\n",  # out of order: the job has asked nothing yet
        b"text compile-ci-claim 0 10\n",  # not a line of its own
        b"compile-ci-claim 0 999999\n",  # more units than any job has tests
        b"compile-ci-claim 0 0\n",
        b"x" * 100 + b"\ncompile-ci-claim 0 1" + b"0" * 60 + b"\n",  # too long to be a request
        b"compile-ci-cl", b"aim 0 10\n",  # a request split between two reads: answered
        b"compile-ci-claim 0 10\n" * 10_000,  # the same request again and again: answered once
        b"compile-ci-claim 1 10\r\n",
        b"../compile-ci-claim 2 10\n",
    ]
    for chunk in forged:
        tap.write(chunk)
    assert asked.calls == [(0, 10), (1, 10)]
    assert sorted(os.listdir(tmp_path)) == ["0", "1"]  # one file per request answered, nothing else written
    assert bytes(log) == b"".join(forged)  # the log keeps everything the job printed

    def broken(_request: int, _units: int) -> int:
        raise ConnectionError("the broker is down")

    tap = GrantTap(sink, GrantChannel(tmp_path / "down", broken))
    (tmp_path / "down").mkdir()
    tap.write(b"compile-ci-claim 0 3\n")  # the job is told why, and ends with it (suites/claiming.py)
    assert (tmp_path / "down" / "0").read_text().startswith(f"{UNANSWERED}: ConnectionError: the broker is down")


def test_a_shard_that_cut_its_tests_otherwise_is_refused(redis_url: str) -> None:
    claims = Claims(redis_url, 3600)
    assert [claims.grant_unit("j:1", 0, r, 3) for r in range(4)] == [0, 1, 2, -1]
    with pytest.raises(ValueError, match="into 4 units, a shard before it into 3"):
        claims.grant_unit("j:1", 1, 0, 4)
    assert claims.grant_unit("j:1", 0, 1, 3) == 1  # a retried attempt's second request: what it was given
    assert claims.grant_unit("j:2", 1, 0, 4) == 0  # a re-run of the job is a new attempt: its own counter
