"""Real architectures through the six suites on CPU: tests/suites/models_repo declares torchvision's ResNet, timm's
EfficientNet and transformers' GPT-2 (small configurations, random weights) and two library activations to fuse;
their requirements come through the service's install phase (downloaded once per key, the runner's torch provided).

What CI runs here is the declared-target test of each suite (the selections below); `bench/suites.py --targets
tests/suites/models_repo` runs every test of every suite on them, cold and warm.
"""

from __future__ import annotations

import json
import os
import sys
import tomllib
from pathlib import Path

import pytest

from service.config import Settings
from service.jobs import install

from .suite_run import run_suite

MODELS_REPO = Path(__file__).resolve().parent / "models_repo"
MODELS = ("tv_resnet", "timm_efficientnet", "hf_gpt2")
# Per suite: the tests that exercise declared targets, and the names that must pass. Autograd runs the inductor
# backend only (aot_eager adds 50 s and is in the bench); correctness the training step (its ten adversarial input
# variants per model are in the bench); passes all five hooks on a training step of GPT-2 (the hooks do not depend
# on the library, and each model there is a fresh compile: the passes bypass the cache).
SELECTIONS: dict[str, tuple[str, set[str]]] = {
    "correctness": ("test_declared_model", {f"test_declared_model[{m}]" for m in MODELS}),
    "autograd": ("test_declared_model_gradients and inductor",
                 {f"test_declared_model_gradients[{m}-inductor]" for m in MODELS}),
    "freezing": ("test_declared_model", {f"test_declared_model[{m}]" for m in MODELS}),
    "layout": ("test_declared_model", {f"test_declared_model[{m}]" for m in MODELS}),
    "passes": ("test_every_hook_sees_the_graphs_and_numerics_hold and hf_gpt2",
               {"test_every_hook_sees_the_graphs_and_numerics_hold[hf_gpt2]"}),
    "fusion": ("test_declared_fusion", {"test_declared_fusion[hf_gelu_new]", "test_declared_fusion[timm_hard_mish]"}),
}


def _config() -> dict[str, dict[str, object]]:
    return tomllib.loads((MODELS_REPO / "compile-ci.toml").read_text())


@pytest.fixture(scope="module")
def deps() -> Path:
    """The install phase for the sample's [install] requirements, as a LocalRunner worker runs it (the worker's
    interpreter is the job's, so its torch is the one provided). Kept per key under the user's cache directory:
    a second CI run on the same machine downloads nothing."""
    requirements = tuple(_config()["install"]["requirements"])  # type: ignore[arg-type]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "compile-ci-tests"
    settings = Settings("unused", "1", "unused", data_dir=cache)
    try:
        site = install.prepare(settings, requirements, f"local-{Path(sys.executable).name}")
    except install.InstallFailed as exc:
        pytest.fail(f"the install phase failed for {requirements}:\n" + "\n".join(exc.lines))
    assert site is not None and not (site / "torch").exists(), "the install phase put a torch beside the runner's"
    return site


def job_env(out: Path | None = None) -> dict[str, str]:
    env = {"COMPILE_CI_TARGETS": json.dumps(_config()["targets"]), "COMPILE_CI_CHECKOUT": str(MODELS_REPO)}
    return {**env, "COMPILE_CI_OUTPUT_DIR": str(out)} if out else env


@pytest.mark.parametrize("suite", list(SELECTIONS))
def test_real_models_pass_each_suite(suite: str, deps: Path, tmp_path: Path) -> None:
    selection, expected = SELECTIONS[suite]
    run = run_suite(suite, selection, tmp_path, plugin="suites.plugin", extra_env=job_env(tmp_path / "out"),
                    deps=deps, timeout=900)
    assert run.returncode == 0, run.describe()
    assert run.named("passed") == expected, run.describe()
