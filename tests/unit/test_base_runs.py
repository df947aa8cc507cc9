"""A base result is a fact about the base commit: a base run runs the suites its head's config names (like for like)
but installs what the base commit's own `.compile-ci.toml` asks for, read from a real git repository."""

from __future__ import annotations

from pathlib import Path

import pytest

from runners.checkout import Checkout
from service.devkit.sandbox.sample_repo import commit_file, init_repo
from service.jobs import base_runs
from service.jobs.install import InstallFailed
from service.repo_config import CONFIG_FILE
from service.store import Run

SUITES = ("correctness", "fusion")
BASE_CONFIG = """\
[install]
requirements = ["numpy>=1.26"]
package = false
[suites]
run = ["correctness"]
devices = ["cpu"]
"""
# The pull request adds a dependency (one that patches inductor, say) and a suite.
HEAD_CONFIG = """\
[install]
requirements = ["numpy>=1.26", "inductor-patcher==2.0"]
[suites]
run = ["correctness", "fusion"]
devices = ["cpu"]
"""


def _run(trigger: str, sha: str, config_text: str | None = None) -> Run:
    return Run(id=f"{trigger}-{sha[:8]}", trigger=trigger, head_sha=sha, config_text=config_text)


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, str, str]:
    path = tmp_path / "repo"
    base = init_repo(path, {CONFIG_FILE: BASE_CONFIG, "README.md": "base\n"})
    head = commit_file(path, "pr", CONFIG_FILE, HEAD_CONFIG, "add a dependency and a suite")
    return path / ".git", base, head


def test_a_base_run_installs_the_base_commits_requirements_and_runs_the_heads_suites(
        repo: tuple[Path, str, str], tmp_path: Path) -> None:
    mirror, base, head = repo
    checkout = Checkout(tmp_path / "mirrors")
    config = base_runs.job_config(checkout, mirror, _run("base", base, HEAD_CONFIG), SUITES)
    assert not isinstance(config, list), config
    assert config.requirements == ("numpy>=1.26",) and config.install_package is False  # the base's [install]
    assert config.suites == ("correctness", "fusion")  # the head's suites, to compare like for like
    own = base_runs.job_config(checkout, mirror, _run("pull_request", head), SUITES)
    assert not isinstance(own, list), own
    assert own.requirements == ("numpy>=1.26", "inductor-patcher==2.0") and own.install_package is True


def test_a_base_commit_whose_config_cannot_be_read_installs_nothing_and_says_so(
        repo: tuple[Path, str, str], tmp_path: Path) -> None:
    mirror, _base, _head = repo
    broken = commit_file(mirror.parent, "main", CONFIG_FILE, "[install]\nrequirements = 3\n", "break the config")
    with pytest.raises(InstallFailed, match="base commit's .compile-ci.toml"):
        base_runs.job_config(Checkout(tmp_path / "mirrors"), mirror, _run("base", broken, HEAD_CONFIG), SUITES)
