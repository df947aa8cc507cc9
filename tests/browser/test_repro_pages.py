"""What `compile-ci repro` reads of a job: its description (commit, failed tests with a repro, requirements,
wheels) and the wheels themselves; a wheels.json an older attempt's job planted reaches nothing it should not."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from service.config import Settings
from service.jobs import install
from service.store import Job, Store
from service.wheel_store import wheel_path
from tests.browser.seed import SeededTest, seed_job, seed_run

WHEEL = b"PK\x03\x04 a wheel's bytes"


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
