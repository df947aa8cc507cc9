"""The GPU sandbox's pieces that need no GPU: the declared-targets repository it opens, and what it counts."""

from __future__ import annotations

import subprocess
from pathlib import Path

import suites
from service.devkit.sandbox.declared import SUITES, create_declared_repo, generated_code_summary
from service.planning.plan import MULTI_GPU_SUITES, builtin_suites
from service.repo_config import default_config, parse_repo_config

BUILTIN_SUITES = builtin_suites(Path(suites.__file__).parent)


def test_the_declared_repository_runs_all_six_suites_on_the_device(tmp_path: Path) -> None:
    repo = create_declared_repo(tmp_path / "repo", "cuda")
    show = subprocess.run(["git", "-C", str(repo.path), "show", f"{repo.head_sha}:.compile-ci.toml"],
                          capture_output=True, text=True, check=True).stdout
    config = parse_repo_config(show, BUILTIN_SUITES)
    assert not isinstance(config, list), config
    # Every suite a repository gets by default that runs on one GPU: the sandbox's cuda workers each own one
    # (distributed needs two; the opt-in `ops` sweep is not a default).
    assert set(config.suites) == set(SUITES) == set(default_config(BUILTIN_SUITES).suites) - MULTI_GPU_SUITES
    assert config.devices == ("cuda",)
    assert config.targets["models"] == ["zoo.models:examples"]
    # The pull request adds the zoo: the base has none of it.
    listed = subprocess.run(["git", "-C", str(repo.path), "ls-tree", "-r", "--name-only", repo.base_sha],
                            capture_output=True, text=True, check=True).stdout
    assert "zoo/models.py" not in listed


def test_kernels_are_counted_per_job_in_the_last_attempt(tmp_path: Path) -> None:
    def code(job: str, attempt: int, test: str, text: str) -> None:
        path = tmp_path / "run123" / job / str(attempt) / "tests" / test / "output_code_0.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    code("run123-correctness-cuda", 1, "a", "plain python")  # an older attempt: not counted
    code("run123-correctness-cuda", 2, "a", "@triton.jit\ndef triton_poi_fused(): ...")
    code("run123-correctness-cuda", 2, "b", "extern_kernels.mm(...)")
    code("run123-correctness-cpu", 1, "a", "cpp_fused_add_0 = ...")
    assert generated_code_summary(tmp_path, "cuda") == {"run123 correctness: files": 2,
                                                        "run123 correctness: with kernels": 1}
    assert generated_code_summary(tmp_path, "cpu") == {"run123 correctness: files": 1,
                                                       "run123 correctness: with kernels": 1}
