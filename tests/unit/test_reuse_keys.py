"""Reuse by content (service/planning/reuse_keys.py, service/planning/affected.py): `.compile-ci.toml` read key by key,
the groups a change leaves as they were, and the keys that must be equal for a result to be reused.

Named cases beside a property over the whole space of (config change, changed paths), sampled at random (seeded,
printed): a test whose inputs a change reaches is never reused."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from service.compare.budgets import Budgets
from service.planning.affected import SURFACE_FILES, decide
from service.planning.import_closure import ModuleIndex, closure
from service.planning.reuse_keys import (
    Inputs,
    closure_digest,
    config_differences,
    group_keys,
    suites_digest,
)
from service.repo_config import RepoConfig
from suites.shard_plan import CORPUS_GROUP as CORPUS
from tests.unit.test_affected import HEAD

RESNET, VIT, KERNELS = "zoo.resnet:examples", "zoo.vit:examples", "fusedpkg.kernels:examples"
BASE = RepoConfig(suites=("correctness", "fusion"), devices=("cpu",),
                  targets={"models": [RESNET, VIT], "fuse": [KERNELS]})


def change(**fields: object) -> RepoConfig:
    return dataclasses.replace(BASE, **fields)


def targets(**kinds: list[str]) -> RepoConfig:
    return change(targets={**BASE.targets, **kinds})


# (what the head's config changed, the groups whose results are reused): one key at a time.
CONFIG_CASES = [
    ("nothing", BASE, (CORPUS, KERNELS, RESNET, VIT)),
    ("a model added", targets(models=[RESNET, VIT, "zoo.new:examples"]), (CORPUS, KERNELS, RESNET, VIT)),
    ("a model removed", targets(models=[RESNET]), (CORPUS, KERNELS, RESNET)),
    ("a model's spec changed", targets(models=[RESNET, "zoo.vit:more_examples"]), (CORPUS, KERNELS, RESNET)),
    ("models reordered", targets(models=[VIT, RESNET]), (CORPUS, KERNELS, RESNET, VIT)),
    ("a spec moved from fuse to models", targets(models=[RESNET, VIT, KERNELS], fuse=[]), (CORPUS, RESNET, VIT)),
    ("a fuse target added", targets(fuse=[KERNELS, "zoo.vit:fusions"]), (CORPUS, KERNELS, RESNET, VIT)),
    ("install.requirements", change(requirements=("einops==0.8.0",)), ()),
    ("install.package", change(install_package=False), ()),
    ("suites.run", change(suites=("correctness", "fusion", "ops")), ()),
    ("suites.devices", change(devices=("cpu", "cuda")), ()),
    ("suites.repo_tests", change(repo_tests=("tests",)), ()),
    ("suites.timeout_minutes", change(timeout_minutes=10), ()),
    ("suites.flaky_reruns", change(flaky_reruns=0), ()),
    ("suites.torch", change(torch=("2.13", "2.14")), ()),
    ("budgets", change(budgets=Budgets(new_graph_breaks=0)), ()),
    ("a declared pass", targets(post_grad_passes=["passes.rewrite:rewrite"]), ()),
    ("a compiler target", targets(compiler=["zoo.patches:install"]), ()),
    ("comment.always (reaches no job)", change(comment_always=True), (CORPUS, KERNELS, RESNET, VIT)),
    ("canary.enabled (reaches no job)", change(canary=False), (CORPUS, KERNELS, RESNET, VIT)),
]


@pytest.mark.parametrize(("what", "head", "reused"), CONFIG_CASES, ids=[c[0] for c in CONFIG_CASES])
def test_the_config_is_read_key_by_key(what: str, head: RepoConfig, reused: tuple[str, ...]) -> None:
    decision = decide([".compile-ci.toml"], head, BASE, ModuleIndex(HEAD), HEAD.get, lambda _p: None)
    assert decision.not_affected == reused, what
    if not reused:
        assert ".compile-ci.toml reaches every test" in decision.reason


def test_the_keys_that_differ_are_named() -> None:
    head = change(requirements=("einops==0.8.0",), suites=("correctness",),
                  targets={**BASE.targets, "post_grad_passes": ["p:q"]})
    assert config_differences(head, BASE) == ["install.requirements", "suites.run", "targets.post_grad_passes"]
    assert config_differences(targets(models=["zoo.other:examples"]), BASE) == []  # a group's own key


@pytest.mark.parametrize(("changed", "reused"), [
    (["zoo/vit.py"], (CORPUS, KERNELS, RESNET)),  # one model's module
    (["README.md"], (CORPUS, KERNELS, RESNET, VIT)),
    (["zoo/patches.py"], ()),  # reaches into torch's compiler
    (["requirements.txt"], ()),
])
def test_a_changed_path_with_a_changed_key_reuses_what_neither_reaches(
        changed: list[str], reused: tuple[str, ...]) -> None:
    head = targets(models=[RESNET, VIT, "zoo.new:examples"])  # declaring a new model, as the sandbox's PRs would
    decision = decide([*changed, ".compile-ci.toml"], head, BASE, ModuleIndex(HEAD), HEAD.get, lambda _p: None)
    assert decision.not_affected == reused


PATHS = sorted(HEAD) + ["README.md", "docs/a.rst", "zoo/weights.json", "zoo/new_module.py", *SURFACE_FILES[1:6]]
CONFIGS = [case[1] for case in CONFIG_CASES]


def test_no_change_ever_reuses_a_test_whose_inputs_it_reaches() -> None:
    """Any change (a random set of paths of the space, one of the config changes above): every reused declared
    target's closure misses the changed Python, nothing is reused past a changed surface file or a changed shared
    key, and reusing is monotone (a larger change never reuses more)."""
    seed = random.randrange(2**32)
    print(f"seed {seed}")
    rng = random.Random(seed)
    index = ModuleIndex(HEAD)
    for _ in range(300):
        changed = rng.sample(PATHS, rng.randint(0, 4))
        head = rng.choice(CONFIGS)
        reused = decide(changed, head, BASE, index, HEAD.get, lambda _p: None).not_affected
        more = decide([*changed, rng.choice(PATHS)], head, BASE, index, HEAD.get, lambda _p: None).not_affected
        assert set(more) <= set(reused), (seed, changed)
        if config_differences(head, BASE) or any(p in SURFACE_FILES or p == "zoo/patches.py" for p in changed):
            assert reused == (), (seed, changed)
        for spec in set(reused) - {CORPUS}:
            reach = closure(index, spec.partition(":")[0], HEAD.get)
            assert not reach.files & set(changed), (seed, spec, changed)
            assert spec in (BASE.targets["models"] + BASE.targets["fuse"]), (seed, spec)


def inputs(**fields: str) -> Inputs:
    return dataclasses.replace(Inputs("suites", "image-sha256:1-torch2.13.0", "cpu", "", "config"), **fields)


def keys_at(files: dict[str, bytes], declared: RepoConfig = BASE, **fields: str) -> dict[str, str]:
    index = ModuleIndex(files)
    digests = {spec: closure_digest(index, closure(index, spec.partition(":")[0], files.get), files.get)
               for spec in (RESNET, VIT, KERNELS)}
    return group_keys(inputs(**fields), declared, digests)


def test_a_key_changes_with_each_input_and_only_its_group_with_its_files() -> None:
    same = keys_at(HEAD)
    assert keys_at(dict(HEAD)) == same
    for name in ("suites", "build", "device", "torch", "config"):  # every test depends on these
        other = keys_at(HEAD, **{name: "other"})
        assert all(other[group] != same[group] for group in same), name
    touched = keys_at({**HEAD, "zoo/vit.py": b"def examples():\n    return [1]\n"})
    assert {g for g in same if touched[g] != same[g]} == {VIT}
    new_module = keys_at({**HEAD, "zoo/extra.py": b"X = 2\n"})  # a module vit's imports name, now present
    assert {g for g in same if new_module[g] != same[g]} == {VIT}
    assert keys_at(HEAD, targets(fuse=[KERNELS, RESNET]))[RESNET] != same[RESNET]  # declared as a fuse target too


def test_compile_cis_suite_code_is_one_digest_of_every_file(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "test_x.py").write_text("def test(): pass\n")
    (tmp_path / "a" / "__pycache__").mkdir()
    first = suites_digest(tmp_path)
    (tmp_path / "a" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    suites_digest.cache_clear()
    assert suites_digest(tmp_path) == first  # bytecode is not the code
    (tmp_path / "a" / "helper.py").write_text("X = 1\n")
    suites_digest.cache_clear()
    assert suites_digest(tmp_path) != first
