"""Which groups of tests a change leaves as they were (service/planning/affected.py, import_closure.py): the declared
targets whose import closures its diff does not touch, and the built-in corpus unless it reaches the compiler surface;
everything whenever it touches that surface or is unsure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.planning.affected import decide, decide_for_checkout
from service.planning.import_closure import ModuleIndex, closure, imported_names
from service.repo_config import RepoConfig
from suites.shard_plan import CORPUS_GROUP as CORPUS

HEAD = {
    "zoo/__init__.py": b"",
    "zoo/blocks.py": b"import math\nSCALE = 1\n",
    "zoo/resnet.py": b"from .blocks import SCALE\nfrom . import heads\n\ndef examples():\n    return []\n",
    "zoo/heads/__init__.py": b"",
    "zoo/heads/linear.py": b"X = 1\n",
    "zoo/vit.py": b"def examples():\n    import zoo.attention as attn\n    return []\n",
    "zoo/attention.py": b"from zoo.extra import helper  # extra.py does not exist yet\n",
    "zoo/plugins.py": b"import importlib\n\ndef examples():\n    return importlib.import_module('zoo.vit').x()\n",
    "zoo/patches.py": b"from torch._inductor import lowering\n",
    "src/fusedpkg/__init__.py": b"",
    "src/fusedpkg/kernels.py": b"def examples():\n    return []\n",
    "passes/rewrite.py": b"from zoo import blocks\n\ndef rewrite(graph):\n    pass\n",
    "scripts/train.py": b"print('not imported by any target')\n",
}
TARGETS = {"models": ["zoo.resnet:examples", "zoo.vit:examples"], "fuse": ["fusedpkg.kernels:examples"]}
ALL = (CORPUS, "fusedpkg.kernels:examples", "zoo.resnet:examples", "zoo.vit:examples")


def config(targets: dict[str, list[str]]) -> RepoConfig:
    return RepoConfig(suites=("correctness",), devices=("cpu",), targets=targets)


def decided(changed: list[str], targets: dict[str, list[str]] | None = None,
            base: dict[str, bytes] | None = None) -> tuple[str, ...]:
    index = ModuleIndex(HEAD)
    same = config(targets or TARGETS)
    decision = decide(changed, same, same, index, HEAD.get, (base or {}).get)
    return decision.not_affected


@pytest.mark.parametrize(("changed", "not_affected"), [
    (["zoo/vit.py"], (CORPUS, "fusedpkg.kernels:examples", "zoo.resnet:examples")),
    (["zoo/blocks.py"], (CORPUS, "fusedpkg.kernels:examples", "zoo.vit:examples")),  # resnet imports it, relatively
    (["zoo/heads/linear.py"], ALL),  # `from . import heads` runs heads/__init__.py, not heads.linear
    (["zoo/heads/__init__.py"], (CORPUS, "fusedpkg.kernels:examples", "zoo.vit:examples")),
    (["zoo/__init__.py"], (CORPUS, "fusedpkg.kernels:examples")),  # every zoo module imports its package
    (["zoo/attention.py"], (CORPUS, "fusedpkg.kernels:examples", "zoo.resnet:examples")),  # imported in a function
    (["zoo/extra.py"], (CORPUS, "fusedpkg.kernels:examples", "zoo.resnet:examples")),  # a new module vit's imports name
    (["src/fusedpkg/kernels.py"], (CORPUS, "zoo.resnet:examples", "zoo.vit:examples")),  # a src/ layout
    (["scripts/train.py"], ALL),  # Python no target imports
    (["README.md", "docs/zoo.rst"], ALL),  # documentation
    ([".compile-ci.toml"], ALL),  # the config, read key by key: no key differs here
    ([], ALL),
])
def test_a_target_runs_when_its_import_closure_changed(changed: list[str], not_affected: tuple[str, ...]) -> None:
    assert decided(changed) == not_affected


@pytest.mark.parametrize("changed", [
    ["conftest.py"], ["tests/conftest.py"], ["pyproject.toml"], ["setup.py"],
    ["requirements.txt"], ["requirements-dev.txt"], ["zoo/model.pth"],  # install, torch pins
    ["zoo/patches.py"],  # patches inductor (no target imports it: a patch works on every test of the job)
    ["zoo/weights.json"], ["zoo/kernel.cpp"],  # not Python: what reads it cannot be told
    ["passes/rewrite.py"],  # a declared pass
])
def test_the_compiler_surface_or_an_unsure_change_runs_everything(changed: list[str]) -> None:
    targets = {**TARGETS, "post_grad_passes": ["passes.rewrite:rewrite"]}
    assert decided(changed, targets) == ()


def test_a_declared_pass_runs_everything_through_what_it_imports() -> None:
    targets = {**TARGETS, "post_grad_passes": ["passes.rewrite:rewrite"]}
    assert decided(["zoo/blocks.py"], targets) == ()  # the pass imports zoo.blocks
    assert decided(["zoo/vit.py"], targets) == (CORPUS, "fusedpkg.kernels:examples", "zoo.resnet:examples")


def test_a_file_that_reached_into_torch_before_the_change_runs_everything() -> None:
    # The head deleted a patch (its head version is gone): the base's version says what it was.
    patch = b"torch._dynamo.config.cache_size_limit = 64\n"
    assert decided(["zoo/old_patch.py"], base={"zoo/old_patch.py": patch}) == ()
    assert decided(["zoo/old_note.py"], base={"zoo/old_note.py": b"NOTE = 1\n"}) == ALL


@pytest.mark.parametrize("text", [b"torch.backends.cudnn.allow_tf32 = True", b"torch.set_default_dtype(x)",
                                  b"import torch.library", b"os.environ['TORCHINDUCTOR_X'] = '1'",
                                  b"torch._inductor.config.freezing = True", b"from torch import _dynamo"])
def test_global_switches_in_a_changed_model_run_everything(text: bytes) -> None:
    head = {**HEAD, "zoo/vit.py": text + b"\n"}
    same = config(TARGETS)
    assert decide(["zoo/vit.py"], same, same, ModuleIndex(head), head.get, lambda _p: None).not_affected == ()


def test_a_target_that_imports_by_computed_name_runs_whenever_python_changed() -> None:
    targets = {"models": ["zoo.plugins:examples", "zoo.resnet:examples"]}
    assert decided(["scripts/train.py"], targets) == (CORPUS, "zoo.resnet:examples")
    assert decided(["README.md"], targets) == (CORPUS, "zoo.plugins:examples", "zoo.resnet:examples")
    reach = closure(ModuleIndex(HEAD), "zoo.plugins", HEAD.get)
    assert reach.dynamic == ("zoo/plugins.py",)


def test_relative_imports_resolve_like_python() -> None:
    assert imported_names(b"from . import a\nfrom ..b import c\nfrom .d import *\n", "p.q.m", False) == [
        "p.q", "p.q.a", "p.b", "p.b.c", "p.q.d"]
    assert imported_names(b"from . import a\n", "p.q", True) == ["p.q", "p.q.a"]  # in a package's __init__
    assert imported_names(b"from ... import x\n", "top", False) == []  # beyond the top: Python refuses it too
    assert imported_names(b"def broken(:\n", "m", False) is None  # what it imports is unknown: dynamic


def test_without_declared_models_or_fuse_targets_the_corpus_is_still_reused() -> None:
    passes = config({"post_grad_passes": ["passes.rewrite:rewrite"]})
    decision = decide(["zoo/vit.py"], passes, passes, ModuleIndex(HEAD), HEAD.get, lambda _p: None)
    assert decision.not_affected == (CORPUS,) and "does not reach the compiler" in decision.reason


def test_a_checkout_on_disk_is_read_without_following_links(tmp_path: Path) -> None:
    for path, text in HEAD.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes(text)
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "hook.py").write_text("import zoo.vit\n")
    same = config(TARGETS)
    decision = decide_for_checkout(tmp_path, ["zoo/vit.py"], same, same, lambda _p: None)
    assert decision.not_affected == (CORPUS, "fusedpkg.kernels:examples", "zoo.resnet:examples")
    assert "zoo.resnet:examples" in decision.line and decision.line.startswith("compile-ci: nothing these tests")
    (tmp_path / "zoo" / "blocks.py").unlink()
    (tmp_path / "zoo" / "blocks.py").symlink_to("/etc/hostname")  # a link in the checkout is never read
    reach = closure(ModuleIndex.of_checkout(tmp_path), "zoo.resnet", lambda p: None if p == "zoo/blocks.py"
                    else (tmp_path / p).read_bytes())
    assert "zoo/blocks.py" in reach.dynamic
    assert decide_for_checkout(tmp_path, ["scripts/train.py"], same, same, lambda _p: None).not_affected == (
        CORPUS, "fusedpkg.kernels:examples", "zoo.vit:examples")


def test_the_ops_sweep_is_told_what_a_pull_request_changed_unless_it_touches_install_or_config() -> None:
    from service.planning.affected import CHANGED_FILES_ENV, changed_files_env

    changed = ("zoo/lowerings/sin.py", "README.md")
    assert json.loads(changed_files_env("ops", changed)[CHANGED_FILES_ENV]) == list(changed)
    assert changed_files_env("correctness", changed) == {}  # only the sweep aims by it
    assert changed_files_env("ops", None) == {}  # not read (a push, no base job): every patch counts
    assert changed_files_env("ops", ("requirements.txt", "zoo/lowerings/sin.py")) == {}
    assert changed_files_env("ops", (".compile-ci.toml",)) == {}
    assert changed_files_env("ops", tuple(f"zoo/models/module_{i:05}.py" for i in range(5000))) == {}  # past 100 kB
