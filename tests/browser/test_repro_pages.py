"""What `compile-ci repro` reads of a job: its description (commit, failed tests with a repro, requirements,
wheels) and the wheels themselves; a wheels.json an older attempt's job planted reaches nothing it should not. And
the test page's repro, in headless Chromium: in the first screen under a long traceback, with the minifier script
and the crashed module linked beside repro.py when the job left them (plain files only)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from flask.testing import FlaskClient
from playwright import sync_api

from service.config import Settings
from service.jobs import install
from service.store import Job, Store, TestResult
from service.wheel_store import wheel_path
from suites.naming import sanitise_nodeid
from tests.browser.seed import SeededTest, seed_job, seed_run
from tests.browser.test_layout import chromium  # noqa: F401 - fixture

pytest_plugins = ["tests.browser.test_browser_e2e"]  # the `live` server fixture
WHEEL = b"PK\x03\x04 a wheel's bytes"
CRASHED = "correctness/test_correctness.py::test_declared_model[crashes_in_codegen]"


@pytest.fixture
def job(settings: Settings, store: Store, tmp_path: Path) -> Job:
    run = seed_run(store, repo="octo/zoo", pr=3, sha="b" * 40)
    job = seed_job(settings, store, run, [SeededTest("t.py::test_bad", "failed"), SeededTest("t.py::test_ok")])
    site = tmp_path / "env" / "site"  # an environment as the install phase leaves it
    (tmp_path / "env" / "wheelhouse").mkdir(parents=True)
    (tmp_path / "env" / "wheelhouse" / "tinydep-1.0-py3-none-any.whl").write_bytes(WHEEL)
    site.mkdir()
    install.record_wheels(settings.artifacts_dir / run.id / job.id / "1", site, ("tinydep==1.0",),
                          settings.artifacts_dir, run.repo_id)
    return job


def test_a_jobs_description_and_its_wheels(client: FlaskClient, job: Job) -> None:
    info = client.get(f"/jobs/{job.id}/repro.json").get_json()
    digest = hashlib.sha256(WHEEL).hexdigest()
    assert (info["head_sha"], info["pull_request"], info["repository"], info["attempt"]) == ("b" * 40, 3, "octo/zoo", 1)
    assert [t["nodeid"] for t in info["tests"]] == ["t.py::test_bad"]  # failed, with a repro.py
    assert info["tests"][0]["repro"] == f"/jobs/{job.id}/files/tests/t.py__test_bad/repro.py"
    assert info["requirements"] == ["tinydep==1.0"]
    assert info["wheels"] == [{"name": "tinydep-1.0-py3-none-any.whl", "sha256": digest, "size": len(WHEEL),
                               "url": f"/jobs/{job.id}/wheels/tinydep-1.0-py3-none-any.whl"}]
    with client.get(info["wheels"][0]["url"]) as answer:
        assert answer.status_code == 200 and answer.data == WHEEL
        assert answer.headers["Content-Type"] == "application/octet-stream"
    with client.get(f"/jobs/{job.id}/attempts/1/wheels/tinydep-1.0-py3-none-any.whl") as answer:
        assert answer.data == WHEEL
    assert client.get(f"/jobs/{job.id}/wheels/other-1.0-py3-none-any.whl").status_code == 404


@pytest.mark.parametrize("planted", ["other repository", "bad names", "link", "oversized", "not json"])
def test_a_planted_wheel_list_reaches_no_other_file(client: FlaskClient, job: Job, settings: Settings,
                                                   planted: str) -> None:
    attempt = settings.artifacts_dir / job.run_id / job.id / "1"
    theirs = wheel_path(settings.artifacts_dir, 999, "c" * 64)  # another repository's wheel, its hash known
    theirs.parent.mkdir(parents=True)
    theirs.write_bytes(b"their private package")
    listed = attempt / "wheels.json"
    entry = {"name": "x-1.0-py3-none-any.whl", "sha256": "c" * 64, "size": 1}
    if planted == "other repository":
        listed.write_text(json.dumps({"wheels": [entry]}))
    elif planted == "bad names":
        listed.write_text(json.dumps({"wheels": [{**entry, "name": "../../../meta.json"}, {**entry, "sha256": "../x"},
                                                 {**entry, "name": "x.whl\n"}, {**entry, "size": True}, "x"]}))
    elif planted == "link":
        os.unlink(listed)
        (attempt / "elsewhere.json").write_text(json.dumps({"wheels": [entry]}))
        listed.symlink_to(attempt / "elsewhere.json")
    elif planted == "oversized":
        listed.write_text(json.dumps({"wheels": [entry], "pad": "x" * 300_000}))
    else:
        listed.write_bytes(b"\xff\x00")
    info = client.get(f"/jobs/{job.id}/repro.json").get_json()
    assert info["wheels"] == ([] if planted == "bad names" else
                              [{**entry, "url": f"/jobs/{job.id}/wheels/{entry['name']}"}]
                              if planted == "other repository" else None)
    for name in ("x-1.0-py3-none-any.whl", "..%2F..%2F..%2Fmeta.json", "tinydep-1.0-py3-none-any.whl"):
        assert client.get(f"/jobs/{job.id}/wheels/{name}").status_code == 404


def _long_traceback(store: Store, job_id: str) -> str:
    frames = "".join(f"  File \"/torch/_inductor/lowering.py\", line {n}, in frame_{n}\n    return inner(x)\n"
                     for n in range(300))
    details = f"Traceback (most recent call last):\n{frames}RuntimeError: the last line of a long traceback\n"
    with store.session() as s:
        for row in s.query(TestResult).filter(TestResult.job_id == job_id, TestResult.outcome == "failed"):
            row.details = details
    return details


def test_the_repro_is_in_the_first_screen_under_a_long_traceback_with_the_minifier_beside_it(
        live: Settings, chromium: sync_api.Browser,  # noqa: F811 - the fixture
) -> None:
    store = Store(live.database_url)
    run = seed_run(store, repo="octo/zoo", pr=4, sha="c" * 40)
    job = seed_job(live, store, run, [SeededTest(CRASHED, "failed")])
    _long_traceback(store, job.id)
    folder = live.artifacts_dir / run.id / job.id / "1" / "tests" / sanitise_nodeid(CRASHED)
    (folder / "minify.py").write_text("# runs torch's minifier on the model\n")
    (folder / "crashed_graph.py").write_text("# the generated module that crashed\n")
    page = chromium.new_page(viewport={"width": 1280, "height": 800})
    page.goto(f"{live.public_url}/jobs/{job.id}/tests/{sanitise_nodeid(CRASHED)}")
    for shown in ("#failure", "#repro-command", "#repro-files"):
        box = page.locator(shown).bounding_box()
        assert box is not None and box["y"] + box["height"] <= 800, (shown, box)  # no scrolling needed
    failure = page.locator("#failure")
    assert failure.evaluate("e => e.scrollHeight > e.clientHeight")  # the rest scrolls in its own box
    assert "the last line of a long traceback" in failure.inner_text()
    links = page.locator("#repro-files a")
    assert links.all_inner_texts() == ["minify.py", "crashed_graph.py"]
    for n, text in enumerate(("# runs torch's minifier on the model\n", "# the generated module that crashed\n")):
        href = links.nth(n).get_attribute("href")
        assert href == f"/jobs/{job.id}/files/tests/{sanitise_nodeid(CRASHED)}/{links.nth(n).inner_text()}"
        answer = page.request.get(f"{live.public_url}{href}")
        assert answer.ok and answer.text() == text and answer.headers["content-type"].startswith("text/plain")


def test_a_planted_link_is_never_offered_as_the_minifier(client: FlaskClient, job: Job, settings: Settings,
                                                         tmp_path: Path) -> None:
    folder = settings.artifacts_dir / job.run_id / job.id / "1" / "tests" / "t.py__test_bad"
    secret = tmp_path / "secret.txt"
    secret.write_text("not the job's")
    (folder / "minify.py").symlink_to(secret)  # an older attempt's job could leave one
    page = client.get(f"/jobs/{job.id}/tests/t.py__test_bad").get_data(as_text=True)
    assert 'id="repro-command"' in page and "minify.py" not in page and 'id="repro-files"' not in page
    assert client.get(f"/jobs/{job.id}/files/tests/t.py__test_bad/minify.py").status_code == 404
