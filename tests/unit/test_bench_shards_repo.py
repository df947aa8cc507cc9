"""bench/shards.py builds the repository it measures: its stand-in zoo, or a declared-targets repository given with
--targets (tests/suites/models_repo); either way the service must read the config it writes as the bench means it."""

from __future__ import annotations

from pathlib import Path

from bench.shard_repos import declared_repository, stand_in_repository
from service.planning.plan import builtin_suites
from service.repo_config import RepoConfig, parse_repo_config

ROOT = Path(__file__).resolve().parents[2]
SUITES = builtin_suites(ROOT / "suites")


MODELS = ["realzoo.resnet:examples", "realzoo.efficientnet:examples", "realzoo.gpt2:examples"]


def _parsed(text: str) -> RepoConfig:
    config = parse_repo_config(text, SUITES)
    assert isinstance(config, RepoConfig), [p.render() for p in config]
    return config


def test_the_real_model_repository_keeps_its_install_and_targets_and_runs_the_benchs_suite() -> None:
    repo = declared_repository(ROOT / "tests" / "suites" / "models_repo", ["autograd"], "cpu", installed=False)
    config = _parsed(repo.config)
    assert (config.suites, config.devices, config.flaky_reruns) == (("autograd",), ("cpu",), 0)
    assert config.requirements == ("torchvision==0.28.0", "timm==1.0.31", "transformers==5.17.0")
    assert not config.install_package
    assert config.targets == {"models": MODELS, "fuse": ["realzoo.fused:examples"]}
    # One module per model: the bench's one-model pull request changes the first, ResNet's, and only that target.
    assert repo.model == "realzoo/resnet.py" and "realzoo/vision_ops.py" in repo.files
    assert "compile-ci.toml" not in repo.files and not any("__pycache__" in p for p in repo.files)
    assert repo.patches == "realzoo/compile_ci_bench_patches.py" and repo.patches not in repo.files


def test_the_stand_in_zoo_declares_one_module_per_model() -> None:
    repo = stand_in_repository(2, ["correctness", "freezing"], "cuda")
    config = _parsed(repo.config)
    assert (config.suites, config.devices) == (("correctness", "freezing"), ("cuda",))
    assert config.targets == {"models": ["zoo.resnet_block:examples", "zoo.unet_block:examples"]}
    assert (repo.model, repo.patches) == ("zoo/resnet_block.py", "zoo/patches.py")


def test_installed_runs_the_sample_with_the_interpreters_packages() -> None:
    """A GPU host has no index: the sample's requirements go, the rest of its [install] (package = false) stays."""
    repo = declared_repository(ROOT / "tests" / "suites" / "models_repo", ["correctness", "layout"], "cuda",
                               installed=True)
    config = _parsed(repo.config)
    assert (config.suites, config.devices, config.requirements) == (("correctness", "layout"), ("cuda",), ())
    assert not config.install_package
    assert config.targets == {"models": MODELS, "fuse": ["realzoo.fused:examples"]}
