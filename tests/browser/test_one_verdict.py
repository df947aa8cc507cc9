"""One verdict everywhere (issue 29): a red pull request, a green one whose only failure fails at its base too, and
a green one with a flaky test, run through the webhook, a real Celery worker and LocalRunner, judged against the
default branch's push run; then read as a maintainer reads them — the check run and its title on the GitHub
emulator, the sticky comment, and in headless Chromium the runs list, the run grid, the job page and a test page.
Every surface must say the same words."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright import sync_api

from service.config import Settings
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.sandbox.deliveries import push_event
from service.devkit.sandbox.sample_repo import commit_file, init_repo
from service.devkit.sandbox.stack import INSTALLATION_ID
from service.store import Store, job_id_of_external
from tests.browser.test_layout import chromium  # noqa: F401 - fixture
from tests.integration.suite_worker import worker_running_suite
from tests.integration.test_base_judgement import FULL_NAME, await_check_run, await_comment, compared, deliver
from tests.integration.test_base_judgement import open_pr as open_judged_pr

pytest_plugins = ["tests.browser.test_browser_e2e"]  # the `live` server fixture
SUITE = '''
import os, pathlib

def _knob(name):
    path = pathlib.Path(os.environ["COMPILE_CI_CHECKOUT"]) / name
    return path.read_text().strip() if path.exists() else ""

def test_always_passes():
    pass

def test_follows_the_pull_request():
    assert _knob("verdict.txt") == "pass", "the pull request asked this test to fail"

def test_broken_on_main_too():
    assert _knob("broken.txt") != "yes", "broken on the default branch as well"

def test_flaky_when_planted():
    once = pathlib.Path(os.environ["COMPILE_CI_OUTPUT_DIR"]) / ".failed-once"
    if _knob("flaky.txt") == "yes" and not once.exists():
        once.write_text("1")
        raise AssertionError("fails on its first attempt in the job only")
'''
CASES = {  # pull request: (file it changes, content, conclusion, title, {test: badges})
    "red": ("verdict.txt", "fail\n", "failure", "1 new failure, 1 failing at base — 2 failed, 2 passed",
            {"test_follows_the_pull_request": ["NEW"], "test_broken_on_main_too": ["AT BASE"]}),
    "green at base": ("notes.txt", "not Python\n", "success", "Green — 1 failing at base (1 failed, 3 passed)",
                      {"test_broken_on_main_too": ["AT BASE"]}),
    "reused": ("notes.md", "docs only\n", "success", "Green — 4 reused from the base (no tests)",
               {"test_broken_on_main_too": ["REUSED"], "test_always_passes": ["REUSED"]}),
    "flaky": ("flaky.txt", "yes\n", "success", "Green — 1 failing at base, 1 flaky (1 failed, 3 passed)",
              {"test_broken_on_main_too": ["AT BASE"], "test_flaky_when_planted": ["FLAKY"]}),
}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repos" / FULL_NAME
    init_repo(path, {"verdict.txt": "pass\n", "broken.txt": "yes\n",  # a test broken on main too
                     ".compile-ci.toml": '[suites]\ndevices = ["cpu"]\n'})
    return path


@pytest.fixture
def worker(live: Settings, tmp_path: Path, emulator: GitHubEmulator) -> Iterator[None]:
    with worker_running_suite(live, tmp_path, emulator, "test_tiny.py", SUITE, FULL_NAME):
        yield


def _head(repo: Path) -> str:
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "main"], check=True, capture_output=True,
                          text=True).stdout.strip()


def _columns(body: str, title: str) -> tuple[int, int, int]:
    """The comment's figures for the check whose row shows `title`: new, failing at base, flaky."""
    (row,) = [line for line in body.splitlines() if line.startswith("| [") and f" {title} |" in line]
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    return int(cells[2]), int(cells[3]), int(cells[4])


def _said(title: str, words: str) -> int:
    """What a title counts of `words` ("1 new failure", "2 flaky"), 0 when it names none."""
    found = re.search(rf"\b(\d+) {words}", title)
    return int(found[1]) if found else 0


def _texts(page: sync_api.Page, selector: str) -> list[str]:
    return [" ".join(t.split()) for t in page.locator(selector).all_inner_texts()]


def test_the_same_words_on_github_the_comment_and_every_page(
        live: Settings, repo: Path, worker: None, emulator: GitHubEmulator,
        chromium: sync_api.Browser,  # noqa: F811 - the fixture
) -> None:
    base = _head(repo)
    deliver(live, "push", push_event(full_name=FULL_NAME, repo_id=4002, installation_id=INSTALLATION_ID,
                                     clone_url=f"https://github.com/{FULL_NAME}.git", branch="main",
                                     before="0" * 40, after=base))
    await_check_run(emulator, base, lambda r: r["status"] == "completed")
    heads = {}
    for number, (case, (path, text, *_)) in enumerate(CASES.items(), start=31):
        heads[case] = (number, commit_file(repo, f"pr{number}", path, text, case))
        open_judged_pr(live, number, heads[case][1], base)
    store = Store(live.database_url)
    page = chromium.new_page(viewport={"width": 1280, "height": 900})
    for case, (_path, _text, conclusion, title, badges) in CASES.items():
        number, sha = heads[case]
        check_run: dict[str, Any] = await_check_run(emulator, sha, compared)
        assert (check_run["conclusion"], check_run["output"]["title"]) == (conclusion, title), case
        if case == "reused":  # all green and nothing changed: no comment (tests/integration/test_reuse.py has one)
            assert await_comment(emulator, number, lambda c: True, timeout_s=2) == []
        else:
            (comment,) = await_comment(emulator, number, lambda c, title=title: title in c["body"])
            assert f"| {'❌' if conclusion == 'failure' else '✅'} {title} |" in comment["body"], comment["body"]
            new, at_base, flaky = _columns(comment["body"], title)  # the row's figures count what its title says
            assert (new, at_base, flaky) == (_said(title, "new failure"), _said(title, "failing at base"),
                                             _said(title, "flaky") + _said(title, "known flaky")), (case,
                                                                                                   comment["body"])
            listed = re.search(r"^\*\*New failures\*\* \((\d+)\)$", comment["body"], re.M)
            assert (int(listed[1]) if listed else 0) == new, (case, comment["body"])  # and so does the list below

        job = store.get_job(job_id_of_external(check_run["external_id"]))
        assert job is not None
        page.goto(f"{live.public_url}/?repo={FULL_NAME}&pr={number}")
        assert _texts(page, "#runs tbody tr td:first-child, #runs tr td:first-child")[:1] == [conclusion], case
        page.goto(f"{live.public_url}/runs/{job.run_id}")
        assert _texts(page, "#grid a.cell") == [conclusion] and _texts(page, "#grid .verdict-title") == [title]
        page.goto(f"{live.public_url}/jobs/{job.id}")
        assert _texts(page, "#job-state") == [conclusion] and _texts(page, "#job-title") == [title], case
        for test, words in badges.items():
            row = page.locator("#test-table tr", has_text=test)
            assert _texts(row, ".badge.verdict") == words, (case, test)
        first, words = next(iter(badges.items()))
        page.locator("#test-table tr", has_text=first).locator("a").first.click()
        assert _texts(page, "h1 .badge.verdict") == words, (case, page.url)
