"""A maintainer in a real headless Chromium (Playwright): from a private repository's Details link, signed out,
through sign-in with GitHub (the emulator), to the failing test, its generated code and the zip; and a running
job's log growing on screen. Screenshots land in var/test-artifacts/screenshots/ (CI keeps them)."""

from __future__ import annotations

import shutil
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright import sync_api
from werkzeug.serving import make_server

from service.config import Settings
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.github_emulator.oauth import SESSION_COOKIE
from service.devkit.sandbox.stack import free_port
from service.store import Store, utcnow
from service.web.app import create_app
from suites.naming import sanitise_nodeid
from tests.browser.conftest import browser_settings
from tests.browser.seed import SeededTest, seed_job, seed_run, write_log
from tests.rows import force_job

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SHOTS = Path(__file__).resolve().parents[2] / "var" / "test-artifacts" / "screenshots"
FAILING = "correctness/test_correctness.py::test_declared_model[counting_scale]"


@pytest.fixture
def live(tmp_path: Path, redis_url: str, emulator: GitHubEmulator, app_keys: tuple[str, str]) -> Iterator[Settings]:
    """The web app on a real loopback port (its public URL is where GitHub sends the browser back)."""
    port = free_port()
    settings = browser_settings(tmp_path, redis_url, emulator, app_keys[0], f"http://127.0.0.1:{port}")
    server = make_server("127.0.0.1", port, create_app(settings), threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield settings
    server.shutdown()
    thread.join()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[sync_api.BrowserContext]:
    if not Path(CHROMIUM).exists():
        pytest.fail("chromium is required (apt-get install chromium)")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch_persistent_context  # a new, empty user-data-dir per test
        context = launched(str(tmp_path / "chromium-profile"), executable_path=CHROMIUM, args=ARGS,
                           accept_downloads=True, viewport={"width": 1280, "height": 900})
        yield context
        context.close()


def shoot(page: sync_api.Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"))


def test_maintainer_follows_the_details_link_of_a_private_repo_to_the_broken_compile(
        live: Settings, emulator: GitHubEmulator, browser: sync_api.BrowserContext, tmp_path: Path) -> None:
    emulator.add_repo("octo/models", private=True)
    emulator.add_installation(2, ["octo/models"])
    emulator.set_permission("octo/models", "maintainer", "write")
    store = Store(live.database_url)
    for n, (duration, compile_time) in enumerate([(3.0, 2.2), (2.6, 1.9), (1.2, 0.4)]):  # earlier pushes
        earlier = seed_run(store, repo="octo/models", pr=None, branch="main", private=True, sha=f"{n}" * 40,
                           age_minutes=60 - n)
        seed_job(live, store, earlier, [SeededTest(FAILING, "passed", duration, compile_time)])
    run = seed_run(store, repo="octo/models", pr=2, private=True, sha="ba6c5641" + "0" * 32)
    tests = [SeededTest(FAILING, "failed", 2.1, 1.4, graphs=2),
             *(SeededTest(f"correctness/test_correctness.py::test_mlp[{mode}]") for mode in ("infer", "train")),
             SeededTest("correctness/test_correctness.py::test_name[<script>alert(1)</script>]", "passed")]
    job = seed_job(live, store, run, tests, log_bytes=20_000)
    green = seed_job(live, store, run, [SeededTest("freezing/test_freezing.py::test_fold", "passed")], suite="freezing")
    # The browser is signed in to (emulated) github.com as the maintainer, and never to compile-ci yet.
    browser.add_cookies([{"name": SESSION_COOKIE, "value": "maintainer", "url": emulator.url}])
    page = browser.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: dialogs.append(dialog.message))

    details_url = f"{live.public_url}/jobs/{green.id}/attempts/1"  # a check run's Details link, opened signed out
    page.goto(details_url)
    expect = sync_api.expect
    expect(page.locator("nav")).to_contain_text("signed in as maintainer")
    assert page.url == details_url  # through GitHub's sign-in and back to the same page
    page.get_by_role("link", name="octo/models #2").click()  # up to the run's suite x device grid
    expect(page.locator("h1")).to_contain_text("octo/models")
    page.get_by_role("link", name="failure").click()
    expect(page.locator("#failing")).to_have_text("Failing tests (1)")
    expect(page.locator(".traceback")).to_contain_text("compiled result differs from eager beyond tolerance")
    expect(page.locator("#test-table")).to_contain_text("test_name[<script>alert(1)</script>]")  # shown as text
    shoot(page, "job-page")

    page.locator(".failing-test a.test-link").click()
    expect(page.locator("h1")).to_contain_text("test_declared_model[counting_scale]")
    expect(page.locator("#history svg circle")).to_have_count(8)  # 4 runs, 2 series
    expect(page.locator(".code").first).to_contain_text("def call(args):")
    expect(page.locator("#repro")).to_contain_text("pytest.main")
    shoot(page, "test-page")
    page.get_by_role("link", name="output_code_1.py").click()
    expect(page.locator("body")).to_contain_text("cpp_fused_relu_1")

    page.goto(f"{live.public_url}/jobs/{job.id}")
    with page.expect_download() as download_info:
        page.locator("#download-zip").click()
    saved = tmp_path / "job.zip"
    download_info.value.save_as(saved)
    names = zipfile.ZipFile(saved).namelist()
    assert f"{job.id}-attempt1/tests/{sanitise_nodeid(FAILING)}/output_code_1.py" in names
    assert dialogs == []  # no script from a test name or a log line ever ran


def test_running_jobs_log_grows_on_screen_until_it_completes(live: Settings,
                                                              browser: sync_api.BrowserContext) -> None:
    store = Store(live.database_url)
    run = seed_run(store, repo="octo/zoo", pr=3)
    job = seed_job(live, store, run, [], state="running")
    log = live.artifacts_dir / run.id / job.id / "1" / "log.txt"
    write_log(log, 2000)
    page = browser.new_page()
    page.goto(f"{live.public_url}/jobs/{job.id}")
    expect = sync_api.expect
    expect(page.locator("#live-note")).to_contain_text("following the log live")
    with open(log, "a") as handle:
        handle.write("\x1b[32mcorrectness/test_correctness.py::test_live_line PASSED\x1b[0m\n")
    expect(page.locator("#log")).to_contain_text("test_live_line PASSED")
    expect(page.locator("#log .ansi32").last).to_have_text("correctness/test_correctness.py::test_live_line PASSED")
    with open(log, "a") as handle:
        handle.write("== 1 passed in 3.2s ==\n")
    force_job(store, job.id, state="completed", conclusion="success", finished_at=utcnow())
    expect(page.locator("#job-state")).to_have_text("success")
    expect(page.locator("#log")).to_contain_text("1 passed in 3.2s")
