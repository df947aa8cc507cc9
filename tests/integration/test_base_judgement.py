"""Pull requests judged against their base: push runs reused, base runs scheduled once, verdicts, sticky comment.

A tiny suite (no torch) whose tests read files of the checkout, so main and each pull request decide what fails;
the real torch.compile cases (graph breaks, generated code) are in tests/e2e/test_base_compare_e2e.py.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from service.compare.comment import MARKER
from service.config import Settings
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.sandbox.deliveries import pull_request_event, push_event, signed
from service.devkit.sandbox.sample_repo import commit_file, init_repo
from service.devkit.sandbox.stack import INSTALLATION_ID
from service.github.markdown import JOINER
from service.store import Store
from service.web.app import create_app
from tests.integration.suite_worker import worker_running_suite

FULL_NAME = "octo/judged"
SUITE = '''
import os, pathlib, time

def _knob(name):
    path = pathlib.Path(os.environ["COMPILE_CI_CHECKOUT"]) / name
    return path.read_text().strip() if path.exists() else ""

def test_always_passes():
    time.sleep(float(_knob("slow.txt") or 0))  # a slow base: its head finishes first

def test_follows_the_pull_request():
    assert _knob("verdict.txt") == "pass", "the pull request asked this test to fail"

def test_broken_on_main_too():
    assert _knob("broken.txt") != "yes", "broken on the default branch as well"
'''


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repos" / FULL_NAME
    init_repo(path, {"verdict.txt": "pass\n", "broken.txt": "yes\n",  # a test broken on main too
                     ".compile-ci.toml": '[suites]\ndevices = ["cpu"]\n'})
    return path


@pytest.fixture
def worker(settings: Settings, tmp_path: Path, emulator: GitHubEmulator) -> Iterator[None]:
    with worker_running_suite(settings, tmp_path, emulator, "test_tiny.py", SUITE, FULL_NAME):
        yield


def deliver(settings: Settings, event: str, payload: dict[str, Any]) -> None:
    headers, body = signed("test-webhook-secret", event, payload)
    response = create_app(settings).test_client().post("/webhook", data=body, headers=headers)
    assert response.status_code == 202, response.json


def open_pr(settings: Settings, number: int, sha: str, base_sha: str) -> None:
    deliver(settings, "pull_request", pull_request_event(
        "opened", full_name=FULL_NAME, repo_id=4002, installation_id=INSTALLATION_ID,
        clone_url=f"https://github.com/{FULL_NAME}.git", number=number, head_sha=sha, head_ref=f"pr{number}",
        base_sha=base_sha))


def head_of(repo: Path, branch: str = "main") -> str:
    return subprocess.run(["git", "-C", str(repo), "rev-parse", branch], check=True, capture_output=True,
                          text=True).stdout.strip()


def await_check_run(emulator: GitHubEmulator, sha: str, until: Callable[[dict[str, Any]], bool],
                    timeout_s: float = 300) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        runs = [r for r in emulator.check_runs(FULL_NAME) if r["head_sha"] == sha]
        if len(runs) == 1 and until(runs[0]):
            return runs[0]
        assert time.monotonic() < deadline, f"check run of {sha[:12]} never got there: {runs}"
        time.sleep(0.1)


def compared(check_run: dict[str, Any]) -> bool:
    return check_run["status"] == "completed" and "Compared with the base" in check_run["output"]["summary"]


def comments_on(emulator: GitHubEmulator, number: int) -> list[dict[str, Any]]:
    return [c for c in emulator.comments if c["issue_number"] == number and c["repository"] == FULL_NAME]


def await_comment(emulator: GitHubEmulator, number: int, until: Callable[[dict[str, Any]], bool],
                  timeout_s: float = 120) -> list[dict[str, Any]]:
    """The comment follows the check run's report in the same task: wait for it, then return every comment."""
    deadline = time.monotonic() + timeout_s
    while not any(until(c) for c in comments_on(emulator, number)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return comments_on(emulator, number)


def test_against_a_push_run_a_base_failure_is_a_warning_and_a_new_failure_is_red(
    settings: Settings, repo: Path, worker: None, emulator: GitHubEmulator
) -> None:
    base = head_of(repo)
    deliver(settings, "push", push_event(full_name=FULL_NAME, repo_id=4002, installation_id=INSTALLATION_ID,
                                         clone_url=f"https://github.com/{FULL_NAME}.git", branch="main",
                                         before="0" * 40, after=base))
    pushed = await_check_run(emulator, base, lambda r: r["status"] == "completed")
    assert pushed["conclusion"] == "failure"  # main itself is judged as ever: one test fails there

    green = commit_file(repo, "pr11", "notes.txt", "read by nothing\n", "notes")  # not Python: every test runs
    open_pr(settings, 11, green, base)
    check_run = await_check_run(emulator, green, compared)
    assert check_run["conclusion"] == "success", check_run["output"]
    assert check_run["output"]["title"] == "Green — 1 failing at base (1 failed, 2 passed)"
    summary = check_run["output"]["summary"]
    assert "**Failing at the base too (not counted against this pull request)**" in summary
    assert "test_tiny.py::test_broken_on_main_too" in summary and "push run" in summary
    levels = {a["annotation_level"] for a in check_run["annotations"]}
    assert levels == {"warning"}, check_run["annotations"]

    red = commit_file(repo, "pr12", "verdict.txt", "fail\n", "break a test")
    open_pr(settings, 12, red, base)
    check_run = await_check_run(emulator, red, compared)
    assert check_run["conclusion"] == "failure"
    assert check_run["output"]["title"] == "1 new failure, 1 failing at base — 2 failed, 1 passed"
    assert "**New failures**" in check_run["output"]["summary"]
    by_test = {a["message"].split("::")[1].split(":")[0]: a["annotation_level"] for a in check_run["annotations"]}
    assert by_test == {"test_follows_the_pull_request": "failure", "test_broken_on_main_too": "warning"}

    store = Store(settings.database_url)
    push_run = next(r for r in store.runs_at_sha(FULL_NAME, base) if r.trigger == "push")
    for sha in (green, red):
        (run,) = store.runs_at_sha(FULL_NAME, sha)
        assert (run.base_sha, run.base_run_id) == (base, push_run.id)
    assert not [r for r in store.recent_runs() if r.trigger == "base"]  # the push run served: nothing scheduled
    (comment,) = await_comment(emulator, 12, lambda c: True)
    assert comment["body"].startswith(MARKER) and "test_follows_the_pull_request" in comment["body"]
    assert "also failing" not in check_run["output"]["summary"] + comment["body"]  # nowhere else yet

    # Another pull request breaking the same test hears that #12 fails it too (inert: no cross-reference made).
    again = commit_file(repo, "pr13", "verdict.txt", "fail\n", "break it as well")
    open_pr(settings, 13, again, base)
    check_run = await_check_run(emulator, again, compared)
    (comment,) = await_comment(emulator, 13, lambda c: True)
    for text in (check_run["output"]["summary"], comment["body"]):
        (line,) = [line for line in text.splitlines() if "test_follows_the_pull_request`](" in line]  # its link
        assert line.endswith(f" — also failing in #{JOINER}12"), line


def test_a_base_run_is_scheduled_once_reused_and_its_heads_judged_again_when_it_finishes(
    settings: Settings, repo: Path, worker: None, emulator: GitHubEmulator
) -> None:
    base = commit_file(repo, "main", "slow.txt", "4\n", "a slow base")
    first = commit_file(repo, "pr21", "slow.txt", "0\n", "a quick head")
    second = commit_file(repo, "pr22", "slow.txt", "0\n", "another quick head")
    open_pr(settings, 21, first, base)
    one = await_check_run(emulator, first, compared)
    open_pr(settings, 22, second, base)
    two = await_check_run(emulator, second, compared)

    # The head finished while its base still ran: judged as without a base (red: a test fails), then judged
    # again when the base finished (green: that test fails at the base too). The check run was PATCHed, not re-made.
    assert [c for s, c in one["history"] if s == "completed"][:1] == ["failure"], one["history"]
    assert one["conclusion"] == "success" and two["conclusion"] == "success"
    store = Store(settings.database_url)
    (base_run,) = [r for r in store.recent_runs() if r.trigger == "base"]
    assert (base_run.head_sha, base_run.gate) == (base, "trusted")  # as trusted as the pull requests (OWNER)
    assert {r.base_run_id for sha in (first, second) for r in store.runs_at_sha(FULL_NAME, sha)} == {base_run.id}
    assert [r for r in emulator.check_runs(FULL_NAME) if r["head_sha"] == base] == []  # internal: no check run
    (job,) = store.jobs_of(base_run.id)
    verdicts = {r.nodeid.split("::")[1]: r.verdict for r in store.results_of(f"{one['external_id']}", 1)}
    assert verdicts == {"test_always_passes": "unchanged", "test_follows_the_pull_request": "unchanged",
                        "test_broken_on_main_too": "failing_at_base"}
    # Created when its head finished, edited when the base did.
    (comment,) = await_comment(emulator, 21, lambda c: "| 0 | 1 | 0 | 0 | 0 |" in c["body"])
    assert comment.get("edits", 0) >= 1 and "| 0 | 1 | 0 | 0 | 0 |" in comment["body"], comment
    assert job.state == "completed" and job.attempt == 1  # run once for both pull requests
    client = create_app(settings).test_client()  # internal, but on the web pages like any run
    assert base_run.id in client.get("/").get_data(as_text=True)
    assert client.get(f"/runs/{base_run.id}").status_code == 200 and client.get(f"/jobs/{job.id}").status_code == 200
