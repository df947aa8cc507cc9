"""Maintainers' daily loop, end to end through the embedded worker: approval, /rerun, and pushes that cancel.

Webhook -> Redis -> real Celery worker on the cpu, cuda and github queues -> LocalRunner running a tiny,
torch-free suite -> the strict fake GitHub, which records check runs, comments and reactions.
"""

from __future__ import annotations

import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import pytest
from celery.contrib.testing.worker import start_worker

from service.config import Settings
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.sandbox.deliveries import check_run_event, issue_comment_event, pull_request_event, signed
from service.devkit.sandbox.sample_repo import commit_file, init_repo
from service.devkit.sandbox.stack import APP_ID, INSTALLATION_ID
from service.jobs.tasks import create_worker_celery
from service.web.app import create_app
from tests.conftest import make_settings
from tests.rendered import assert_inert

ROOT = Path(__file__).resolve().parents[2]
FULL_NAME = "octo/gadgets"
REPO = {"full_name": FULL_NAME, "repo_id": 4002, "installation_id": INSTALLATION_ID,
        "clone_url": f"https://github.com/{FULL_NAME}.git"}
SUITE = '''
import os, pathlib, time

def _verdict():
    return (pathlib.Path(os.environ["COMPILE_CI_CHECKOUT"]) / "verdict.txt").read_text().strip()

def test_passes():
    assert True

def test_takes_as_long_as_the_pull_request_says():
    if _verdict() == "slow":
        time.sleep(120)  # cancelled long before

def test_follows_the_pull_request():
    assert _verdict() != "fail", "the pull request asked this test to fail"
'''
T = TypeVar("T")


@pytest.fixture
def settings(tmp_path: Path, redis_url: str, emulator: GitHubEmulator, app_keys: tuple[str, str],
             checkout_python: Path) -> Settings:
    # The job's python sees this checkout's `suites.plugin` (tests/conftest.py checkout_python), so the progress
    # it writes is the one under test, wherever compile-ci happens to be installed.
    # cuda served too (the tiny suite runs anywhere); progress published every second.
    return make_settings(tmp_path, redis_url, emulator.url, app_keys[0], COMPILE_CI_DEVICES="cpu,cuda",
                         COMPILE_CI_PROGRESS_INTERVAL_SECONDS="1", COMPILE_CI_RUNNER_PYTHON=str(checkout_python))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repos" / FULL_NAME
    init_repo(path, {"verdict.txt": "pass\n", ".compile-ci.toml": '[suites]\ndevices = ["cpu", "cuda"]\n'})
    return path


@pytest.fixture
def worker(settings: Settings, tmp_path: Path, emulator: GitHubEmulator) -> Iterator[None]:
    suite = tmp_path / "suites" / "correctness"
    suite.mkdir(parents=True)
    (suite / "test_tiny.py").write_text(textwrap.dedent(SUITE))
    emulator.add_installation(INSTALLATION_ID, repos=[FULL_NAME])
    emulator.set_permission(FULL_NAME, "maria", "maintain")
    emulator.set_permission(FULL_NAME, "rita", "read")
    app = create_worker_celery(settings, suites_dir=suite.parent)
    with start_worker(app, pool="threads", concurrency=4, perform_ping_check=False, shutdown_timeout=30,
                      queues=["cpu", "cuda", "github"]):
        yield


def deliver(settings: Settings, event: str, payload: dict[str, Any]) -> None:
    headers, body = signed("test-webhook-secret", event, payload)
    response = create_app(settings).test_client().post("/webhook", data=body, headers=headers)
    assert response.status_code == 202, response.json


def push_to_pr(settings: Settings, emulator: GitHubEmulator, action: str, number: int, sha: str, branch: str,
               author: str = "octocat", association: str = "OWNER") -> None:
    emulator.add_pull(FULL_NAME, number, sha, branch, "main", author, association)
    deliver(settings, "pull_request", pull_request_event(action, number=number, head_sha=sha, head_ref=branch,
                                                         base_sha="0" * 40, author=author,
                                                         association=association, **REPO))


def comment(settings: Settings, number: int, body: str, commenter: str, comment_id: int,
            pr_author: str = "octocat", pr_association: str = "OWNER") -> None:
    deliver(settings, "issue_comment", issue_comment_event(
        "created", number=number, body=body, commenter=commenter, comment_id=comment_id, pr_author=pr_author,
        pr_association=pr_association, **REPO))


def wait_for(what: Callable[[], T | None], timeout_s: float = 300) -> T:
    """Poll the fake GitHub until it shows what the test waits for."""
    deadline = time.monotonic() + timeout_s
    while (value := what()) in (None, False, []):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)
    return value  # type: ignore[return-value]


def runs_at(emulator: GitHubEmulator, sha: str) -> list[dict[str, Any]]:
    return [r for r in emulator.check_runs(FULL_NAME) if r["head_sha"] == sha]


def settled(emulator: GitHubEmulator, sha: str, count: int) -> list[dict[str, Any]] | None:
    runs = runs_at(emulator, sha)
    done = len(runs) == count and all(r["status"] == "completed" for r in runs)
    return sorted(runs, key=lambda r: (r["name"], r["id"])) if done else None


def summary(runs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(r["name"], r["conclusion"]) for r in runs]


def test_an_untrusted_pull_request_runs_nothing_until_ok_to_test(
    settings: Settings, repo: Path, worker: None, emulator: GitHubEmulator
) -> None:
    sha = commit_file(repo, "outside", "notes.md", "hi\n", "drive-by")
    push_to_pr(settings, emulator, "opened", 7, sha, "outside", author="eve", association="FIRST_TIME_CONTRIBUTOR")
    (waiting,) = wait_for(lambda: settled(emulator, sha, 1))
    assert (waiting["name"], waiting["conclusion"]) == ("compile-ci: approval", "action_required")
    assert "/ok-to-test" in waiting["output"]["summary"]
    details = create_app(settings).test_client().get(urlsplit(waiting["details_url"]).path)
    assert details.status_code == 200, waiting["details_url"]  # the waiting check's Details link opens a page

    untrusted = {"pr_author": "eve", "pr_association": "FIRST_TIME_CONTRIBUTOR"}
    comment(settings, 7, "/ok-to-test", "eve", 71, **untrusted)  # the author cannot approve themselves
    (refusal,) = wait_for(lambda: emulator.comments)
    assert "@eve has no access" in refusal["body"]
    assert "`/rerun failed`" not in refusal["body"]  # a well-formed command: no grammar lesson
    assert len(runs_at(emulator, sha)) == 1 and emulator.reactions == []

    comment(settings, 7, "Looks safe to me.\n/ok-to-test", "maria", 72, **untrusted)
    runs = wait_for(lambda: settled(emulator, sha, 4))
    assert summary(runs) == [("compile-ci: approval", "action_required"), ("compile-ci: approval", "success"),
                             ("correctness (cpu)", "success"), ("correctness (cuda)", "success")]
    assert runs[1]["output"]["title"] == "Approved by @maria"
    assert emulator.reactions == [{"repository": FULL_NAME, "comment_id": 72, "content": "+1", "id": 1}]

    later = commit_file(repo, "outside", "notes.md", "more\n", "second push")
    push_to_pr(settings, emulator, "synchronize", 7, later, "outside", author="eve",
               association="FIRST_TIME_CONTRIBUTOR")
    assert summary(wait_for(lambda: settled(emulator, later, 1))) == [("compile-ci: approval", "action_required")]


def test_rerun_cuda_needs_write_access(settings: Settings, repo: Path, worker: None,
                                       emulator: GitHubEmulator) -> None:
    sha = commit_file(repo, "feature", "verdict.txt", "fail\n", "red")
    push_to_pr(settings, emulator, "opened", 8, sha, "feature")
    first = wait_for(lambda: settled(emulator, sha, 2))
    assert summary(first) == [("correctness (cpu)", "failure"), ("correctness (cuda)", "failure")]
    assert [a["identifier"] for a in first[0]["actions"]] == ["rerun"]

    comment(settings, 8, "/rerun cuda", "rita", 81)
    (refusal,) = wait_for(lambda: emulator.comments)
    assert "@rita has read access" in refusal["body"] and "write access" in refusal["body"]
    assert "Commands (one per line" not in refusal["body"]  # the syntax was right: no grammar lesson

    comment(settings, 8, "> /rerun cuda\n/rerun cuda", "maria", 82)
    runs = wait_for(lambda: settled(emulator, sha, 3))
    assert summary(runs) == [("correctness (cpu)", "failure"), ("correctness (cuda)", "failure"),
                             ("correctness (cuda)", "failure")]
    assert runs[2]["external_id"] == runs[1]["external_id"] + "#1"
    assert [r["comment_id"] for r in emulator.reactions] == [82]
    assert len(emulator.comments) == 1  # the accepted command got a reaction, not a reply

    # GitHub's own "Re-run" button on the cpu check run does the same for that one job.
    deliver(settings, "check_run", check_run_event("rerequested", app_id=APP_ID, external_id=runs[0]["external_id"],
                                                   head_sha=sha, **REPO))
    assert [r["name"] for r in wait_for(lambda: settled(emulator, sha, 4))].count("correctness (cpu)") == 2


def test_a_push_during_a_run_cancels_it(settings: Settings, repo: Path, worker: None,
                                        emulator: GitHubEmulator) -> None:
    slow = commit_file(repo, "busy", "verdict.txt", "slow\n", "slow")
    push_to_pr(settings, emulator, "opened", 9, slow, "busy")

    def progress_reported() -> bool:
        titles = [body["output"]["title"] for method, _path, body in emulator.requests
                  if method == "PATCH" and isinstance(body, dict) and "output" in body]
        return any(title.startswith("Running: ") and "/ 3 tests" in title for title in titles)

    wait_for(progress_reported)
    fixed = commit_file(repo, "busy", "verdict.txt", "pass\n", "fast again")
    started = time.monotonic()
    push_to_pr(settings, emulator, "synchronize", 9, fixed, "busy")
    cancelled = wait_for(lambda: settled(emulator, slow, 2))
    assert summary(cancelled) == [("correctness (cpu)", "cancelled"), ("correctness (cuda)", "cancelled")]
    assert time.monotonic() - started < 30  # the 120 s test was stopped, not waited out
    assert f"Superseded by a newer push ({fixed[:12]})" in cancelled[0]["output"]["summary"]
    assert summary(wait_for(lambda: settled(emulator, fixed, 2))) == [("correctness (cpu)", "success"),
                                                                      ("correctness (cuda)", "success")]


def test_a_reply_quotes_the_commenters_lines_as_code_it_cannot_leave(settings: Settings, worker: None,
                                                                    emulator: GitHubEmulator) -> None:
    """The App's reply quotes what was written: a backtick in it must not let the App post a mention or a link."""
    emulator.add_pull(FULL_NAME, 11, "a" * 40, "hostile", "main", "octocat", "OWNER")
    lines = ["/rerun x` @octocat ![x](http://evil.example/i.png) <img src=x> `", "/rerun `@octocat`"]
    comment(settings, 11, "\n".join(lines), "maria", 111)
    (reply,) = wait_for(lambda: emulator.comments)
    greeting, answer = reply["body"].split("\n", 1)
    assert greeting == "@maria:"  # the one mention: whoever asked
    shown = assert_inert(answer)
    assert lines[0] in shown.codes and "`@octocat`" in shown.codes
    assert "takes at most two words" in shown.visible and "is not a suite name" in shown.visible
