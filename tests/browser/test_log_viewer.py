"""The log viewer in headless Chromium, on a job's log as the worker leaves it (the command, then the install,
collect, test and results sections, each test's id as it ran, the times sidecar): sections folded with their
durations, a time on every line, deep links to lines and ranges that open folded sections, and find in the page
(highlights, next and previous, on to the page holding the next match), at 1280 and 390 px."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from playwright import sync_api

from service.config import Settings
from service.store import Store
from tests.browser.seed import SeededTest, seed_job, seed_run, write_job_log
from tests.browser.test_browser_e2e import shoot
from tests.browser.test_layout import WIDTHS, overflow, page_at

pytest_plugins = ["tests.browser.test_browser_e2e", "tests.browser.test_layout"]  # the `live` and `chromium` fixtures
STARTED = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def job_with_log(live: Settings, tests: int = 40, failing: int = 7) -> str:
    store = Store(live.database_url)
    run = seed_run(store, repo="octo/logs", pr=6)
    job = seed_job(live, store, run, [SeededTest("t.py::test_ok")])
    write_job_log(live.artifacts_dir / run.id / job.id / "1", int(STARTED.timestamp() * 1000), tests, failing)
    return job.id


def summaries(page: sync_api.Page) -> list[str]:
    """Each section's title and duration."""
    return page.locator("details.group > summary").evaluate_all(
        "els => els.map(e => [e.querySelector('.title'), e.querySelector('.continued-from'), e.querySelector('.took')]"
        ".filter(x => x).map(x => x.textContent.trim()).join(' '))")


@pytest.mark.parametrize("width", WIDTHS)
def test_sections_times_links_and_find(live: Settings, chromium: sync_api.Browser, width: int) -> None:
    job_id = job_with_log(live)
    page = page_at(chromium, width)
    page.goto(f"{live.public_url}/jobs/{job_id}/log?page=1")
    # The job's sections with how long each took; the set-up ones folded, the tests and results open.
    assert summaries(page) == ["Install the repository (pip install -e . --no-deps --no-index) 12 s",
                          "Collect tests 3.0 s", "Run tests 40 s", "Results 0.4 s"], summaries(page)
    assert not page.locator("#L3").is_visible() and not page.locator("#L8").is_visible()
    failing = page.locator("#L18")  # each test's id as it ran, with the time it started (22 s in)
    sync_api.expect(failing).to_be_visible()
    assert "correctness/test_correctness.py::test_case[7] FAILED" in failing.inner_text()
    assert failing.locator("time").get_attribute("datetime") == "2026-01-02T03:04:27.000Z"
    one, two = (page.locator(f"#L{n}").bounding_box() for n in (53, 54))  # one line tall, no gap between
    assert one and two and abs((two["y"] - one["y"]) - one["height"]) < 1 and one["height"] < 30
    times = page.locator("#L18 time")
    if width == 390:  # a phone keeps the width for the text until asked
        sync_api.expect(times).to_be_hidden()
        page.locator(".times-toggle").first.check()
    sync_api.expect(times).to_have_text("03:04:27")
    assert overflow(page) <= 0
    page.locator("#L12 a.n").click()
    page.locator("#L16 a.n").click(modifiers=["Shift"])
    assert page.evaluate("location.hash") == "#L12-L16"
    sync_api.expect(page.locator("#log .l.sel")).to_have_count(5)

    # Find: every match highlighted, Enter and Shift+Enter (and the arrows) go from one to the next, each a link.
    find = page.locator("#log-find input[name=q]")
    find.fill("TEST_CASE[7]")  # either case
    find.press("Enter")
    sync_api.expect(page.locator("#find-count")).to_have_text("1 of 3 lines")
    sync_api.expect(page.locator("mark.find")).to_have_count(3)
    sync_api.expect(page.locator("#L18.cur")).to_be_in_viewport()
    assert page.locator("#L18 mark.find").inner_text() == "test_case[7]"
    find.press("Enter")
    sync_api.expect(page.locator("#find-count")).to_have_text("2 of 3 lines")
    sync_api.expect(page.locator("#L53.cur")).to_be_in_viewport()
    find.press("Shift+Enter")
    sync_api.expect(page.locator("#L18.cur")).to_be_in_viewport()
    page.locator("#find-prev").click()  # from the first back round to the last
    sync_api.expect(page.locator("#find-count")).to_have_text("3 of 3 lines")
    sync_api.expect(page.locator("#L87.cur")).to_be_in_viewport()
    assert page.evaluate("location.hash") == "#L87"
    shoot(page, f"log-page-{width}")
    if width == 390:
        page.reload()  # the timestamps choice is remembered
        sync_api.expect(page.locator("#L18 time")).to_be_visible()

    # A deep link into a folded section opens it, marked.
    page.goto(f"{live.public_url}/jobs/{job_id}/log?page=1#L3-L4")
    sync_api.expect(page.locator("#L3.sel")).to_be_visible()
    sync_api.expect(page.locator("#log .l.sel")).to_have_count(2)


def test_find_goes_on_to_the_page_holding_the_next_match(live: Settings, chromium: sync_api.Browser) -> None:
    job_id = job_with_log(live, tests=1200, failing=1100)
    page = page_at(chromium, 1280)
    page.goto(f"{live.public_url}/jobs/{job_id}/log?page=2")
    # A page that starts inside a section says so, with the section's duration.
    assert summaries(page)[0] == "Run tests (continued from page 1) 20 m 00 s", summaries(page)
    page.goto(f"{live.public_url}/jobs/{job_id}/log?page=1")
    find = page.locator("#log-find input[name=q]")
    find.fill("test_case[99")  # test 99 on page 1 (line 110), tests 990-999 on page 2 (lines 1001-1010)
    find.press("Enter")
    sync_api.expect(page.locator("#find-count")).to_have_text("1 of 11 lines")
    sync_api.expect(page.locator("#L110.cur")).to_be_in_viewport()
    find.press("Enter")
    page.wait_for_url("**/log?page=2&q=test_case%5B99#L1001")
    sync_api.expect(page.locator("#find-count")).to_have_text("2 of 11 lines")
    sync_api.expect(page.locator("#L1001.cur")).to_be_in_viewport()
    sync_api.expect(page.locator("#L1001 mark.find")).to_have_text("test_case[99")
    page.locator("#log-find input[name=q]").press("Shift+Enter")
    page.wait_for_url("**/log?page=1&q=test_case%5B99#L110")
    sync_api.expect(page.locator("#L110.cur")).to_be_in_viewport()

    # Without the in-page find (the job page's form), the search page lists the lines; each opens highlighted.
    page.goto(f"{live.public_url}/jobs/{job_id}/log/search?q=test_case%5B1100%5D")
    sync_api.expect(page.locator("#search-summary")).to_contain_text("3 lines containing test_case[1100]")
    page.locator("#log a.n").first.click()
    sync_api.expect(page.locator("#L1111.cur")).to_be_in_viewport()
    sync_api.expect(page.locator("#find-count")).to_have_text("1 of 3 lines")
