"""The suites' selection in a real pytest (suites/sharding.py through `-p suites.plugin`): N shards run exactly the
tests one runner runs, once each; tests of declared targets the change cannot affect are left out and listed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from service.planning.selection import not_affected_env, read_selection, shard_env
from suites.naming import sanitise_nodeid

ROOT = Path(__file__).resolve().parents[2]
SUITE = '''
from dataclasses import dataclass
import pytest


@dataclass(frozen=True)
class Declared:  # what suites/targets.py gives a test of a declared model: the spec it came from
    name: str
    spec: str


class TargetError:  # a declared target that failed to load: its test always runs
    spec = "zoo.broken:examples"
    test_id = "broken"


MODELS = [Declared("resnet", "zoo.resnet:examples"), Declared("vit", "zoo.vit:examples")]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_declared_model(model):
    pass


@pytest.mark.parametrize("variant", [(m, v) for m in MODELS for v in ("bf16", "fp32")],
                         ids=lambda pair: f"{pair[0].name}-{pair[1]}")
def test_adversarial_declared_model(variant):
    pass


@pytest.mark.parametrize("model", [TargetError()], ids=["broken"])
def test_unloadable(model):
    pass


@pytest.mark.parametrize("size", range(6))
def test_corpus(size):
    pass


# The passes suite's own zoo carries the spec "builtin": compile-ci's code, the corpus's group. A spec no group key
# covers (an unknown one) runs.
@pytest.mark.parametrize("model", [Declared("conv_block", "builtin"), Declared("odd", "zoo.odd")],
                         ids=lambda m: m.name)
def test_own_zoo(model):
    pass
'''


def run_pytest(tmp_path: Path, name: str, env: dict[str, str]) -> tuple[int, list[str], Path]:
    out = tmp_path / name
    out.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "suites.plugin",
         f"--junitxml={out / 'junit.xml'}", str(tmp_path / "test_zoo.py")],
        env={**os.environ, "PYTHONPATH": str(ROOT), "COMPILE_CI_OUTPUT_DIR": str(out), **env},
        capture_output=True, text=True, cwd=tmp_path, check=False)
    ran = [case.get("name", "") for case in ET.parse(out / "junit.xml").getroot().iter("testcase")]
    return proc.returncode, ran, out


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    (tmp_path / "test_zoo.py").write_text(textwrap.dedent(SUITE))
    return tmp_path


def test_shards_run_every_test_once_and_leave_out_what_the_change_cannot_affect(suite: Path) -> None:
    code, whole, out = run_pytest(suite, "whole", {})
    assert code == 0 and len(whole) == 15 and not (out / "selection.json").exists()  # asked nothing: no selection
    # Each test's groups, in its metrics: what a later job's shard count leaves out (service/jobs/shard_plan.py).
    groups = {name: json.loads((out / "tests" / sanitise_nodeid(f"test_zoo.py::{name}") / "metrics.json")
                               .read_text())["targets"] for name in whole}
    assert groups["test_declared_model[resnet]"] == groups["test_adversarial_declared_model[resnet-bf16]"] == [
        "zoo.resnet:examples"]
    assert groups["test_corpus[3]"] == groups["test_own_zoo[conv_block]"] == ["(built-in corpus)"]
    assert groups["test_unloadable[broken]"] == [] and groups["test_own_zoo[odd]"] == ["zoo.odd"]
    durations = {"test_zoo.py::test_corpus[0]": 30.0, "test_zoo.py::test_declared_model[vit]": 20.0}
    left_out = not_affected_env(["zoo.resnet:examples", "zoo.broken:examples"])
    parts = [run_pytest(suite, f"shard{k}", {**shard_env(k, 2, durations), **left_out}) for k in range(2)]
    ran = [name for _code, names, _out in parts for name in names]
    resnet = ["test_declared_model[resnet]", "test_adversarial_declared_model[resnet-bf16]",
              "test_adversarial_declared_model[resnet-fp32]"]
    assert sorted(ran) == sorted(n for n in whole if n not in resnet) and all(code == 0 for code, _n, _o in parts)
    # The heaviest first onto the first shard: vit's model (its three tests, 70 s), then test_corpus[0] (30 s).
    assert {"test_declared_model[vit]", "test_adversarial_declared_model[vit-bf16]"} <= set(parts[0][1])
    assert "test_corpus[0]" in parts[1][1]
    assert "test_unloadable[broken]" in ran  # a target that failed to load always runs: its failure must show
    selections = [read_selection(out) for _code, _names, out in parts]
    assert all(s.found and s.count == 2 for s in selections)
    assert {tuple(s.order) for s in selections} == {tuple(f"test_zoo.py::{n}" for n in whole if n not in resnet)}
    assert {tuple(s.not_affected) for s in selections} == {tuple(f"test_zoo.py::{n}" for n in resnet)}

    code, ran, out = run_pytest(suite, "empty", {**shard_env(12, 13, {}), **left_out})  # 13 shards of 12 tests
    assert (code, ran) == (0, []) and read_selection(out).index == 12  # nothing to run is not a failure


def test_the_built_in_corpus_is_a_group_of_its_own_and_a_target_that_failed_to_load_still_runs(suite: Path) -> None:
    from suites.shard_plan import CORPUS_GROUP

    code, ran, out = run_pytest(suite, "corpus", not_affected_env([CORPUS_GROUP, "zoo.vit:examples",
                                                                     "zoo.broken:examples"]))
    assert code == 0
    assert sorted(ran) == ["test_adversarial_declared_model[resnet-bf16]",
                           "test_adversarial_declared_model[resnet-fp32]", "test_declared_model[resnet]",
                           "test_own_zoo[odd]", "test_unloadable[broken]"]
    left = read_selection(out).not_affected
    assert sorted(n.split("::")[1] for n in left) == sorted(
        [*(f"test_corpus[{i}]" for i in range(6)), "test_declared_model[vit]", "test_own_zoo[conv_block]",
         "test_adversarial_declared_model[vit-bf16]", "test_adversarial_declared_model[vit-fp32]"])


def test_the_tests_of_one_model_run_in_one_shard(suite: Path) -> None:
    # Without history the split is by count, and one model's three tests would fall on both shards (each compiling
    # that model's graphs cold); grouped by model, each model's tests run together.
    parts = [run_pytest(suite, f"model{k}", shard_env(k, 2, {})) for k in range(2)]
    shard_of = {name: k for k, (_code, names, _out) in enumerate(parts) for name in names}
    assert all(code == 0 for code, _n, _o in parts) and len(shard_of) == 15
    for model in ("resnet", "vit"):
        mine = [f"test_declared_model[{model}]", f"test_adversarial_declared_model[{model}-bf16]",
                f"test_adversarial_declared_model[{model}-fp32]"]
        assert len({shard_of[name] for name in mine}) == 1, (model, shard_of)
    assert {shard_of["test_declared_model[resnet]"], shard_of["test_declared_model[vit]"]} == {0, 1}

