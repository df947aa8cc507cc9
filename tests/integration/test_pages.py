"""The pages behind the Details link: what they show, what they escape, what they refuse."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from service.config import Settings
from service.store import Job, NewRun, Store, TestRecord
from service.web.app import create_app
from suites.naming import sanitise_nodeid

EVIL = "correctness/test_x.py::test_name[<script>alert(1)</script>]"


@pytest.fixture
def job(settings: Settings) -> Job:
    store = Store(settings.database_url)
    run, _ = store.create_run_if_absent(NewRun(
        repo_full_name="octo/zoo", repo_id=1, installation_id=2, clone_url="file:///nowhere", private=False,
        trigger="pull_request", trigger_ref="pr/1", pr_number=1, branch="b", head_sha="a" * 40, sender="octocat"))
    job = Job(id=f"{run.id}-correctness-cpu", run_id=run.id, suite="correctness", device="cpu", timeout_s=60,
              attempt=1, state="completed", conclusion="failure", passed=1, failed=1, skipped=0, errors=0,
              title="1 failed, 1 passed, 0 skipped", detail="", reported="")
    store.add_jobs_if_absent([job])
    out = settings.artifacts_dir / run.id / job.id / "1"
    test_dir = out / "tests" / sanitise_nodeid(EVIL)
    test_dir.mkdir(parents=True)
    (out / "log.txt").write_text("collecting...\n<script>alert('log')</script>\n")
    (test_dir / "output_code_0.py").write_text("def call(args):\n    return '<b>kernel</b>'\n")
    (test_dir / "metrics.json").write_text('{"nodeid": "x", "compile_time_s": 1.5, "graphs": 1}')
    store.replace_results(job.id, 1, [
        TestRecord(nodeid="correctness/test_x.py::test_ok", outcome="passed", duration_s=0.5),
        TestRecord(nodeid=EVIL, outcome="failed", duration_s=1.0, message="boom", details="Traceback <b>"),
    ])
    store.replace_artifacts(job.id, 1, [(str(p.relative_to(out)), p.stat().st_size)
                                        for p in sorted(out.rglob("*")) if p.is_file()])
    return job


@pytest.fixture
def client(settings: Settings) -> FlaskClient:
    return create_app(settings).test_client()


def test_job_page_shows_failures_first_escaped(client: FlaskClient, job: Job) -> None:
    page = client.get(f"/jobs/{job.id}").get_data(as_text=True)
    assert "<script>" not in page
    assert "test_name[&lt;script&gt;alert(1)&lt;/script&gt;]" in page
    assert "&lt;script&gt;alert(&#39;log&#39;)&lt;/script&gt;" in page
    assert page.index("test_name[") < page.index("test_ok")  # the failing test comes first
    assert f'href="/jobs/{job.id}/tests/{sanitise_nodeid(EVIL)}">1 graph' in page


def test_test_page_highlights_generated_code(client: FlaskClient, job: Job) -> None:
    page = client.get(f"/jobs/{job.id}/tests/{sanitise_nodeid(EVIL)}").get_data(as_text=True)
    assert "<th>compile time</th><td class=\"num\">1.50 s</td>" in page and "compile_time_s" not in page
    assert "&lt;b&gt;kernel&lt;/b&gt;" in page and "<b>kernel</b>" not in page
    assert 'class="code"' in page


@pytest.mark.parametrize("path", [
    "/jobs/{job}/files/../../../../etc/passwd",
    "/jobs/{job}/files/%2e%2e/%2e%2e/compile-ci.sqlite3",
    "/jobs/{job}/tests/..",
    "/jobs/not-a-job-id",
    "/jobs/{job}/tests/nope",
    "/runs/../etc",
])
def test_paths_outside_a_job_are_404(client: FlaskClient, job: Job, path: str) -> None:
    assert client.get(path.format(job=job.id)).status_code == 404


def test_artifact_files_download_as_text(client: FlaskClient, job: Job) -> None:
    with client.get(f"/jobs/{job.id}/files/log.txt") as response:
        assert response.status_code == 200 and response.mimetype == "text/plain"
        assert "collecting" in response.get_data(as_text=True)


def test_run_page_and_index(client: FlaskClient, job: Job) -> None:
    page = client.get(f"/runs/{job.run_id}").get_data(as_text=True)
    assert f'href="/jobs/{job.id}"><strong>failure</strong>' in page and "1 passed · 1 failed" in page
    assert job.run_id in client.get("/").get_data(as_text=True)




SECRET = "BEGIN RSA PRIVATE KEY: never on a page"


def test_an_older_attempts_planted_links_and_fifos_are_never_followed(
        client: FlaskClient, job: Job, settings: Settings, tmp_path: Path) -> None:
    """Before issue 26 the job wrote straight into its attempt's directory: what such a job planted there (links to
    the App's key, FIFOs) is still on disk for older attempts, and every page reads it as untrusted data."""
    secret = tmp_path / "app-key.pem"
    secret.write_text(SECRET)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "output_code_0.py").write_text(SECRET)
    out = settings.artifacts_dir / job.run_id / job.id / "1"
    test_dir = out / "tests" / sanitise_nodeid(EVIL)
    (out / "log.txt").unlink()
    (out / "log.txt").symlink_to(secret)
    (out / "coverage.json").symlink_to(secret)
    os.mkfifo(out / "meta.json")
    for name in ("metrics.json", "output_code_0.py"):
        (test_dir / name).unlink()
        os.mkfifo(test_dir / name)
    (test_dir / "repro.py").symlink_to(secret)
    (out / "tests" / "linked").symlink_to(tmp_path / "elsewhere")
    Store(settings.database_url).replace_artifacts(job.id, 1, [("log.txt", 10), ("meta.json", 1), (
        f"tests/{sanitise_nodeid(EVIL)}/repro.py", 5), ("tests/linked/output_code_0.py", 5)])
    base = f"/jobs/{job.id}"
    paths = ["", "/log", "/log/search?q=BEGIN", "/log/live?offset=0", "/artifacts", "/download.zip",
             "/files/log.txt", "/files/meta.json", "/files/coverage.json", f"/tests/{sanitise_nodeid(EVIL)}",
             f"/files/tests/{sanitise_nodeid(EVIL)}/repro.py", "/tests/linked", "/files/tests/linked/output_code_0.py"]
    started = time.monotonic()
    responses = {path: client.get(base + path) for path in paths}
    assert time.monotonic() - started < 20  # a FIFO blocks nobody
    for path, response in responses.items():
        assert response.status_code in (200, 404), (path, response.status_code)
        assert SECRET.encode() not in response.data, path
    for path in ("/log", "/files/log.txt", "/files/meta.json", "/tests/linked", "/files/tests/linked/output_code_0.py"):
        assert responses[path].status_code == 404, path
