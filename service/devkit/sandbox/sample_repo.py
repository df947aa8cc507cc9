"""A sample model repository with two pull requests: one that compiles cleanly, one with a model bug."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from service.devkit.sandbox.sample_index import DEPENDENCY

CONFIG = f"""\
# compile-ci configuration of the sample repository
[install]
requirements = ["{DEPENDENCY}"]

[targets]
models = ["samplezoo.zoo:examples"]

[suites]
run = ["correctness", "repo"]
devices = ["cpu", "cuda"]
repo_tests = ["tests"]
timeout_minutes = 15
"""
PYPROJECT = f"""\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "samplezoo"
version = "0.1"
dependencies = ["{DEPENDENCY}"]
"""
# The repository's own tests: they import its package and its dependency, as after `pip install -e .`.
OWN_TESTS = '''\
from samplezoo.zoo import examples


def test_every_model_runs_eagerly():
    for name, factory, inputs in examples():
        assert factory()(*inputs).isfinite().all(), name
'''

ZOO_MAIN = '''\
"""Models this repository ships, as compile-ci's declared targets."""

import torch
from torch import nn
from zoo_extras import example_batch


class TinyMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


MODELS = [("tiny_mlp", TinyMLP, lambda: (example_batch(4, 16),))]


def examples():
    return [(name, factory, inputs()) for name, factory, inputs in MODELS]
'''

GOOD_MODEL = '''

class ResidualNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(16)
        self.proj = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.proj(self.norm(x)))


MODELS.append(("residual_norm", ResidualNorm, lambda: (torch.randn(4, 16),)))
'''

# A real class of model bug: forward() keeps Python state, so the compiled model (which
# specialises on it) and eager disagree.
BUGGY_MODEL = '''

class CountingScale(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 16)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.proj(x) * self.calls


MODELS.append(("counting_scale", CountingScale, lambda: (torch.randn(4, 16),)))
'''


@dataclass(frozen=True)
class SampleRepo:
    path: Path
    base_sha: str
    good_sha: str
    buggy_sha: str

    @property
    def url(self) -> str:
        return self.path.as_uri()


def _git(path: Path, *args: str) -> str:
    env_args = ["-c", "user.name=compile-ci sandbox", "-c", "user.email=sandbox@compile-ci.invalid",
                "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false"]
    out = subprocess.run(["git", *env_args, *args], cwd=path, check=True, capture_output=True, text=True)
    return out.stdout.strip()


def create_sample_repo(path: Path) -> SampleRepo:
    path.mkdir(parents=True, exist_ok=True)
    _git(path, "init", "-q")
    (path / "samplezoo").mkdir(exist_ok=True)
    (path / "samplezoo" / "__init__.py").write_text('"""A tiny model zoo."""\n')
    (path / "samplezoo" / "zoo.py").write_text(ZOO_MAIN)
    (path / ".compile-ci.toml").write_text(CONFIG)
    (path / "pyproject.toml").write_text(PYPROJECT)
    (path / "tests").mkdir(exist_ok=True)
    (path / "tests" / "test_zoo.py").write_text(OWN_TESTS)
    _git(path, "add", "-A")
    _git(path, "commit", "-q", "-m", "Sample model zoo")
    base = _git(path, "rev-parse", "HEAD")
    shas = []
    for branch, addition, message in (("add-residual-norm", GOOD_MODEL, "Add ResidualNorm"),
                                      ("add-counting-scale", BUGGY_MODEL, "Add CountingScale")):
        _git(path, "checkout", "-q", "-b", branch, base)
        with open(path / "samplezoo" / "zoo.py", "a") as zoo:
            zoo.write(addition)
        _git(path, "commit", "-q", "-am", message)
        shas.append(_git(path, "rev-parse", "HEAD"))
    _git(path, "checkout", "-q", "main")
    return SampleRepo(path, base, shas[0], shas[1])


def init_repo(path: Path, files: dict[str, str]) -> str:
    """A new repository at `path` (made if absent) whose main branch commits `files` one by one; its head sha."""
    path.mkdir(parents=True, exist_ok=True)
    _git(path, "init", "-q", "-b", "main")
    return [commit_file(path, "main", relative, text, f"add {relative}") for relative, text in files.items()][-1]


def commit_file(repo: Path, branch: str, relative: str, text: str, message: str) -> str:
    """Commit one file on `branch` (created from main when new); returns the new head sha."""
    current = _git(repo, "symbolic-ref", "--short", "HEAD")
    if branch != current:
        existing = _git(repo, "branch", "--list", branch)
        _git(repo, "checkout", "-q", *(["-b", branch, "main"] if not existing else [branch]))
    target = repo / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message)
    sha = _git(repo, "rev-parse", "HEAD")
    if branch != current:
        _git(repo, "checkout", "-q", current)
    return sha
