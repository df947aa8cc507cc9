"""A base result is a fact about the base commit: a base run runs the suites its head's config names (like for like)
but installs what the base commit's own `.compile-ci.toml` asks for, read from a real git repository; and a push
run at the base sha serves as the base only when it ran under the key a base run would (runner builds, config), in
a real store."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, cast

import pytest

from runners.checkout import Checkout
from runners.local import LocalRunner
from service.config import Secret, Settings
from service.devkit.sandbox.sample_repo import commit_file, init_repo
from service.jobs.context import WorkerContext
from service.planning import base_runs
from service.repo_config import CONFIG_FILE
from service.store import NewRun, Run, Store

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
    with pytest.raises(base_runs.UnknownInstall, match="base commit's .compile-ci.toml"):
        base_runs.job_config(Checkout(tmp_path / "mirrors"), mirror, _run("base", broken, HEAD_CONFIG), SUITES)


def _context(tmp_path: Path, store: Store, python: str) -> WorkerContext:
    """What linking a base reads: the store and the runner (its builds); nothing here queues or calls GitHub."""
    settings = Settings(webhook_secret=Secret("s"), github_app_id=1, github_private_key=Secret("k"), data_dir=tmp_path)
    unused = cast(Any, None)
    return WorkerContext(settings, store, unused, unused, unused, LocalRunner(python), Checkout(tmp_path / "m"),
                         tmp_path / "suites")


def _new_run(trigger: str, sha: str, number: int | None = None, base_sha: str | None = None) -> NewRun:
    ref = f"pr/{number}" if number else "refs/heads/main"
    return NewRun(repo_full_name="octo/base", repo_id=7, installation_id=1, clone_url="", private=False,
                  trigger=trigger, trigger_ref=ref, pr_number=number, branch="main", head_sha=sha, sender="",
                  base_sha=base_sha)


@pytest.mark.parametrize("push_python, push_config, reused", [
    (sys.executable, HEAD_CONFIG, True),  # same runner builds, same config: the push run is the base
    (sys.executable, HEAD_CONFIG.replace('"numpy>=1.26", "inductor-patcher==2.0"', ""), True),  # only [install] differs
    ("/usr/bin/python3", HEAD_CONFIG, False),  # another runner build (its interpreter, its torch)
    (sys.executable, HEAD_CONFIG.replace('"fusion"', '"correctness"'), False),  # other suites
])
def test_a_push_run_at_the_base_is_reused_only_under_the_base_runs_key(
        tmp_path: Path, push_python: str, push_config: str, reused: bool) -> None:
    store = Store(f"sqlite:///{tmp_path / 'ci.db'}")
    base, head = "b" * 40, "h" * 40
    push, _ = store.create_run_if_absent(_new_run("push", base))
    pusher = _context(tmp_path, store, push_python)
    store.record_config(push.id, push_config, base_runs.base_key(push_config, base_runs.runner_builds(pusher)))
    pull, _ = store.create_run_if_absent(_new_run("pull_request", head, number=3, base_sha=base))
    linked = base_runs.link_base(_context(tmp_path, store, sys.executable), pull, HEAD_CONFIG)
    assert (linked == push.id) is reused
    if not reused:  # a base run of its own at the base sha, under this worker's key
        base_run = store.get_run(linked or "")
        assert base_run is not None and (base_run.trigger, base_run.head_sha) == ("base", base)
