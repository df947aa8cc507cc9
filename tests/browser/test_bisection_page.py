"""The test page shows a failing test's bisection beside its repro: the one line, how to replay it, and the full log,
all of it the job's words escaped; a bisect.json the suites would not write, or a linked log, shows nothing of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from service.config import Settings
from service.store import Job, Store
from tests.browser.seed import SeededTest, seed_job, seed_run

NAME = "t.py__test_bad"
FOUND = {"nodeid": "t.py::test_bad", "status": "found", "backend": "inductor", "subsystem": "lowerings", "number": 4,
         "names": ["reciprocal_1", "aten.reciprocal.default"], "reason": "",
         "replay": "TORCH_BISECT_BACKEND=inductor TORCH_BISECT_SUBSYSTEM=lowerings TORCH_BISECT_MAX=4",
         "suspect": {"verdict": "yours", "count": 1, "changes": [
             {"place": "torch._inductor.lowering.lowerings[aten.reciprocal.default]", "where": "pkg/ops.py:26"}]},
         "place": "torch._inductor.lowering.lowerings[aten.reciprocal.default]", "where": "pkg/ops.py:26"}
SCRIPT = "<script>alert(1)</script>"


@pytest.fixture
def folder(settings: Settings, store: Store) -> tuple[Job, Path]:
    run = seed_run(store, repo="octo/zoo", pr=3, sha="b" * 40)
    job = seed_job(settings, store, run, [SeededTest("t.py::test_bad", "failed")])
    return job, settings.artifacts_dir / run.id / job.id / "1" / "tests" / NAME


def _page(client: FlaskClient, job: Job) -> str:
    answer = client.get(f"/jobs/{job.id}/tests/{NAME}")
    assert answer.status_code == 200
    return answer.get_data(as_text=True)


def test_the_culprit_its_replay_and_its_log_beside_the_repro(client: FlaskClient, folder: tuple[Job, Path]) -> None:
    job, test = folder
    (test / "bisect.json").write_text(json.dumps(FOUND))
    (test / "bisect.log").write_text("run 1, as the test ran: wrong (0.2 s)\nrun 2, backend eager: right (0.1 s)\n")
    page = _page(client, job)
    assert page.index('id="repro-command"') < page.index('id="bisection-heading"')
    assert ("wrong from inductor · lowerings #4 (reciprocal_1, aten.reciprocal.default) · red only with your change "
            "to torch._inductor.lowering.lowerings[aten.reciprocal.default] (pkg/ops.py:26)") in page
    assert f"compile-ci repro --bisect http://ci.example.test/jobs/{job.id}/tests/{NAME}" in page
    assert FOUND["replay"] in page and "run 2, backend eager: right (0.1 s)" in page
    assert f'href="/jobs/{job.id}/files/tests/{NAME}/bisect.log"' in page


def test_the_jobs_words_are_escaped(client: FlaskClient, folder: tuple[Job, Path]) -> None:
    job, test = folder
    (test / "bisect.json").write_text(json.dumps({**FOUND, "status": "flaky", "reason": SCRIPT,
                                                  "names": [SCRIPT], "place": SCRIPT}))
    (test / "bisect.log").write_text(f"{SCRIPT}\n<img src=x onerror=alert(1)>\n")
    page = _page(client, job)
    assert "<script>alert" not in page and "<img src=x" not in page
    assert "bisection flaky: &lt;script&gt;alert(1)&lt;/script&gt;" in page


@pytest.mark.parametrize("planted", ["not the suites' shape", "oversized", "link"])
def test_a_forged_or_linked_bisection_shows_nothing_of_it(client: FlaskClient, folder: tuple[Job, Path],
                                                        tmp_path: Path, planted: str) -> None:
    job, test = folder
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps(FOUND))
    if planted == "link":
        (test / "bisect.json").symlink_to(secret)
        (test / "bisect.log").symlink_to(secret)
    else:
        forged = {**FOUND, "backend": "inductor <b>@octocat</b>"} if planted != "oversized" else \
            {**FOUND, "pad": "x" * 100_000}
        (test / "bisect.json").write_text(json.dumps(forged))
    page = _page(client, job)
    assert 'id="bisection-refused"' in page and 'id="bisection"' not in page and "wrong from" not in page
    assert "pkg/ops.py" not in page and 'id="bisect-log"' not in page
