"""The browser as a maintainer uses it, through Flask: finding runs, private repositories behind sign-in,
logs, downloads, a test's history and the status page."""

from __future__ import annotations

import io
import os
import time
import zipfile
from urllib.parse import parse_qs, urlsplit

import pytest
import redis
import requests
from celery.contrib.testing.worker import start_worker
from flask.testing import FlaskClient

from service.celery_app import create_celery, workers_by_queue
from service.config import Settings
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.github_emulator.oauth import SESSION_COOKIE
from service.store import Store
from suites.naming import sanitise_nodeid
from tests.browser.seed import SeededTest, many_tests, seed_job, seed_run

FAILING = "correctness/test_correctness.py::test_case[000007]"


def sign_in(client: FlaskClient, emulator: GitHubEmulator, login: str, next_path: str) -> str:
    """The OAuth round trip as a browser makes it; returns where the service sends the user at the end."""
    to_github = client.get(f"/login?next={next_path}")
    assert to_github.status_code == 302 and to_github.location.startswith(f"{emulator.url}/login/oauth/authorize")
    back = requests.get(to_github.location, cookies={SESSION_COOKIE: login}, allow_redirects=False, timeout=10)
    callback = urlsplit(back.headers["Location"])
    assert callback.path == "/oauth/callback"
    landed = client.get(f"/oauth/callback?{callback.query}")
    assert landed.status_code == 302
    return landed.location


def test_runs_filter_by_repository_pr_sha_status_and_paginate(client: FlaskClient, settings: Settings,
                                                              store: Store) -> None:
    for n in range(55):
        run = seed_run(store, repo="octo/zoo", pr=n + 1, sha=f"{n:040x}", age_minutes=n)
        seed_job(settings, store, run, [SeededTest("t.py::ok", "failed" if n == 3 else "passed")])
    seed_job(settings, store, seed_run(store, repo="other/repo", pr=1, sha="b" * 40), [], state="running")
    first = client.get("/").get_data(as_text=True)
    assert "56 runs · page 1 of 2" in first and 'rel="next" href="/?page=2"' in first
    assert "57 runs" not in client.get("/?page=2").get_data(as_text=True)
    assert "other/repo" not in client.get("/?repo=octo/zoo&page=2").get_data(as_text=True)
    by_pr = client.get("/?repo=octo/zoo&pr=4").get_data(as_text=True)
    assert "1 run" in by_pr and "PR #4" in by_pr and "PR #5 " not in by_pr
    assert "1 run" in client.get(f"/?sha={3:040x}").get_data(as_text=True)
    failures = client.get("/?status=failure").get_data(as_text=True)
    assert "1 run" in failures and "PR #4" in failures
    assert "1 run" in client.get("/?status=running").get_data(as_text=True)  # other/repo's job is running


def test_private_run_sends_a_signed_out_maintainer_to_sign_in_and_back(
        client: FlaskClient, settings: Settings, store: Store, emulator: GitHubEmulator) -> None:
    emulator.add_repo("octo/secret", private=True)
    emulator.add_installation(2, ["octo/secret"])
    emulator.set_permission("octo/secret", "maintainer", "write")
    run = seed_run(store, repo="octo/secret", private=True)
    job = seed_job(settings, store, run, [SeededTest(FAILING, "failed")], log_bytes=1000)
    details = f"/jobs/{job.id}"
    for path in (details, f"/runs/{run.id}", f"{details}/files/log.txt", f"{details}/download.zip",
                 f"{details}/log?page=1", f"{details}/tests/{sanitise_nodeid(FAILING)}"):
        response = client.get(path)
        assert response.status_code == 302 and response.location.startswith("/login?next="), path
    assert "octo/secret" not in client.get("/").get_data(as_text=True)
    assert sign_in(client, emulator, "maintainer", details) == details
    page = client.get(details).get_data(as_text=True)
    assert "signed in as <strong>maintainer</strong>" in page and "test_case[000007]" in page
    assert "octo/secret" in client.get("/").get_data(as_text=True)  # now listed for this reader


def test_signed_in_stranger_gets_404_and_public_repos_need_no_sign_in(
        client: FlaskClient, settings: Settings, store: Store, emulator: GitHubEmulator) -> None:
    emulator.add_repo("octo/secret", private=True)
    emulator.add_installation(2, ["octo/secret"])
    private_job = seed_job(settings, store, seed_run(store, repo="octo/secret", private=True), [])
    public_job = seed_job(settings, store, seed_run(store, repo="octo/zoo", sha="c" * 40), [])
    assert client.get(f"/jobs/{public_job.id}").status_code == 200
    sign_in(client, emulator, "stranger", "/")
    assert client.get(f"/jobs/{private_job.id}").status_code == 404


def test_sign_in_refuses_a_forged_state_and_never_redirects_off_site(client: FlaskClient,
                                                                      emulator: GitHubEmulator) -> None:
    assert sign_in(client, emulator, "octocat", "//evil.example/x") == "/"
    client.get("/login?next=/")
    assert client.get("/oauth/callback?code=abc&state=forged").status_code == 400


@pytest.mark.parametrize("path", [
    "/jobs/{job}/files/../../../../etc/passwd", "/jobs/{job}/files/%2e%2e/%2e%2e/compile-ci.sqlite3",
    "/jobs/{job}/files/leak", "/jobs/{job}/tests/..", "/jobs/{job}/tests/%2e%2e", "/jobs/{job}/log/../../x",
    "/jobs/{job}x/download.zip", "/runs/{run}0", "/jobs/{job}/files/tests",
])
def test_traversal_and_links_out_of_the_job_answer_404(client: FlaskClient, settings: Settings, store: Store,
                                                        path: str) -> None:
    run = seed_run(store)
    job = seed_job(settings, store, run, [SeededTest("t.py::ok")])
    os.symlink(settings.data_dir / "compile-ci.sqlite3", settings.artifacts_dir / run.id / job.id / "1" / "leak")
    assert client.get(path.format(job=job.id, run=run.id)).status_code == 404


def test_zip_holds_the_whole_job_but_no_symlinked_file(client: FlaskClient, settings: Settings,
                                                       store: Store) -> None:
    run = seed_run(store)
    job = seed_job(settings, store, run, [SeededTest(FAILING, "failed")], log_bytes=5000)
    os.symlink("/etc/hostname", settings.artifacts_dir / run.id / job.id / "1" / "leak")
    response = client.get(f"/jobs/{job.id}/download.zip")
    assert response.headers["Content-Disposition"] == f'attachment; filename="{job.id}-attempt1.zip"'
    names = zipfile.ZipFile(io.BytesIO(response.get_data())).namelist()
    folder = f"{job.id}-attempt1/tests/{sanitise_nodeid(FAILING)}"
    assert f"{job.id}-attempt1/log.txt" in names and f"{folder}/output_code_0.py" in names
    assert f"{folder}/repro.py" in names and not any(name.endswith("leak") for name in names)


def test_whole_log_in_pages_with_line_anchors(client: FlaskClient, settings: Settings, store: Store) -> None:
    job = seed_job(settings, store, seed_run(store), [], log_bytes=300_000)
    jump = client.get(f"/jobs/{job.id}/log?line=1500")
    assert jump.location == f"/jobs/{job.id}/log?page=2#L1500"
    page = client.get(f"/jobs/{job.id}/log?page=2").get_data(as_text=True)
    assert '<div class="l" id="L1500"><a class="n" href="#L1500">1500</a>' in page
    assert '<span class="ansi32">PASSED</span>' in page and "\x1b" not in page
    job_page = client.get(f"/jobs/{job.id}").get_data(as_text=True)
    assert f'href="/jobs/{job.id}/log?line=' in job_page and "The end of the log." in job_page


def test_large_generated_code_is_cut_with_a_link_to_the_raw_file(client: FlaskClient, settings: Settings,
                                                                 store: Store) -> None:
    run = seed_run(store)
    job = seed_job(settings, store, run, [SeededTest(FAILING, "failed")])
    folder = settings.artifacts_dir / run.id / job.id / "1" / "tests" / sanitise_nodeid(FAILING)
    (folder / "output_code_1.py").write_text("x = 1  # <script>\n" * 40_000)
    page = client.get(f"/jobs/{job.id}/tests/{sanitise_nodeid(FAILING)}").get_data(as_text=True)
    assert "Showing the beginning" in page and f"/files/tests/{sanitise_nodeid(FAILING)}/output_code_1.py" in page
    assert len(page) < 1_500_000 and "<script>" not in page


def test_test_page_charts_duration_and_compile_time_over_the_repositorys_runs(
        client: FlaskClient, settings: Settings, store: Store) -> None:
    for n, (duration, compile_time) in enumerate([(1.5, 0.9), (2.5, 1.9), (0.5, 0.2)]):
        run = seed_run(store, pr=3 if n == 2 else None, branch="main", sha=f"{n}" * 40, age_minutes=10 - n)
        job = seed_job(settings, store, run, [SeededTest(FAILING, "failed", duration, compile_time)])
    seed_job(settings, store, seed_run(store, repo="other/repo"), [SeededTest(FAILING, "failed", 99.0)])
    page = client.get(f"/jobs/{job.id}/tests/{sanitise_nodeid(FAILING)}").get_data(as_text=True)
    assert "History (3 recent runs of octo/zoo: the default branch and PR #3)" in page
    assert page.count("<title>duration ") == 3 and page.count("<title>compile time ") == 3
    assert "duration 2.500 s · 11111111" in page and "99.000" not in page
    assert '<span class="k">def</span>' in page or 'class="k"' in page  # highlighted by Pygments


def test_status_page_shows_queue_depth_workers_and_running_jobs(client: FlaskClient, settings: Settings,
                                                                store: Store) -> None:
    connection = redis.Redis.from_url(settings.redis_url)
    connection.lpush("cpu", b"{}", b"{}", b"{}")
    connection.close()
    job = seed_job(settings, store, seed_run(store), [], state="running")
    page = client.get("/status").get_data(as_text=True)
    assert "<tr><td>cpu</td><td>3</td>" in page and "<tr><td>cuda</td><td>0</td>" in page
    assert "No worker answered." in page
    assert "No worker consumes the <strong>cpu</strong> queue: cpu jobs wait" in page
    assert "No worker consumes the <strong>github</strong> queue" in page
    assert "none (not a device of this deployment)" in page  # cuda: COMPILE_CI_DEVICES=cpu
    assert f'<a href="/jobs/{job.id}">correctness (cpu)</a>' in page


def test_status_page_flags_only_the_queues_no_live_worker_consumes(client: FlaskClient, settings: Settings) -> None:
    app = create_celery(settings)
    app.conf.worker_hijack_root_logger = False
    with start_worker(app, pool="solo", perform_ping_check=False, queues=["cpu"], shutdown_timeout=10):
        deadline = time.monotonic() + 60
        while "cpu" not in workers_by_queue(app, timeout=2.0):  # the worker's consumer is up: it answers broadcasts
            assert time.monotonic() < deadline, "the test worker never answered a broadcast"
        start = time.monotonic()
        page = client.get("/status").get_data(as_text=True)
        elapsed = time.monotonic() - start
    assert "No worker consumes the <strong>cpu</strong>" not in page
    assert "No worker consumes the <strong>github</strong> queue: nothing is planned or reported" in page
    assert "<tr><td>cpu</td><td>0</td>\n<td>1</td></tr>" in page
    assert elapsed < 1.5  # one half-second broadcast


def test_live_log_endpoint_returns_only_complete_new_lines(client: FlaskClient, settings: Settings,
                                                           store: Store) -> None:
    run = seed_run(store)
    job = seed_job(settings, store, run, [], state="running")
    log = settings.artifacts_dir / run.id / job.id / "1" / "log.txt"
    log.write_bytes(b"one\ntwo\nthr")
    first = client.get(f"/jobs/{job.id}/log/live?offset=0").get_json()
    assert first["offset"] == 8 and 'id="L2"' in first["html"] and "thr" not in first["html"]
    with open(log, "ab") as handle:
        handle.write(b"ee <b>\n")
    second = client.get(f"/jobs/{job.id}/log/live?offset={first['offset']}").get_json()
    assert 'id="L3"' in second["html"] and "three &lt;b&gt;" in second["html"] and second["state"] == "running"


def test_a_big_job_page_lists_every_test_and_links_the_whole_tree(client: FlaskClient, settings: Settings,
                                                                  store: Store) -> None:
    job = seed_job(settings, store, seed_run(store), many_tests(300), log_bytes=200_000)
    page = client.get(f"/jobs/{job.id}").get_data(as_text=True)
    assert page.count("<tr><td><code>correctness/") == 300 and "Failing tests (3)" in page
    assert "300 folders, one per test" in page
    tree = client.get(f"/jobs/{job.id}/artifacts").get_data(as_text=True)
    assert tree.count("metrics.json</a>") == 300


def test_callback_query_carries_the_code_once(client: FlaskClient, emulator: GitHubEmulator) -> None:
    """A replayed callback (browser back button) cannot sign in twice with the same code."""
    to_github = client.get("/login?next=/")
    back = requests.get(to_github.location, cookies={SESSION_COOKIE: "octocat"}, allow_redirects=False, timeout=10)
    query = parse_qs(urlsplit(back.headers["Location"]).query)
    assert client.get(f"/oauth/callback?code={query['code'][0]}&state={query['state'][0]}").status_code == 302
    client.get("/logout")
    client.post("/logout")
    client.get("/login?next=/")
    assert client.get(f"/oauth/callback?code={query['code'][0]}&state={query['state'][0]}").status_code == 400
