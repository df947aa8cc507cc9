"""The history page of a test across its repository (`/tests/<repo id>/<suite>/<device>/<test>`): its failure rate,
the pull requests it fails in now, the known-flaky state with its end date, each run linked; private repositories'
history only for their readers; the test page links to it."""

from __future__ import annotations

from datetime import timedelta

from flask.testing import FlaskClient

from service.config import Settings
from service.store import Store, TestResult, utcnow
from suites.naming import sanitise_nodeid
from tests.browser.seed import SeededTest, seed_job, seed_run
from tests.rows import force_job

NODEID = "correctness/test_correctness.py::test_wobbly"


def _flaky(store: Store, job_id: str) -> None:
    with store.session() as s:
        for row in s.query(TestResult).filter(TestResult.job_id == job_id):
            row.metrics = {**(row.metrics or {}), "reruns": ["failed"]}  # failed, then passed in the job


def test_a_tests_history_across_the_repository(client: FlaskClient, settings: Settings, store: Store) -> None:
    main = seed_run(store, pr=None, branch="main", sha="1" * 40, age_minutes=300)
    _flaky(store, seed_job(settings, store, main, [SeededTest(NODEID, "passed")]).id)
    other = seed_run(store, pr=8, sha="2" * 40, age_minutes=200)
    _flaky(store, seed_job(settings, store, other, [SeededTest(NODEID, "passed")]).id)
    failing = seed_run(store, pr=9, sha="3" * 40, age_minutes=100)
    seed_job(settings, store, failing, [SeededTest(NODEID, "failed")])
    page = client.get(f"/tests/1/correctness/cpu/{sanitise_nodeid(NODEID)}").get_data(as_text=True)
    assert "<strong>1 failed</strong> (33 %), 2 flaky" in page
    assert "Failing now in pull request #9." in page and 'id="known-flaky"' in page and "KNOWN FLAKY" in page
    assert page.count('<tr><td>') == 3 and "PR #8" in page and "default branch" in page
    test_page = client.get(f"/jobs/{failing.id}-correctness-cpu/tests/{sanitise_nodeid(NODEID)}").get_data(
        as_text=True)
    assert f'href="/tests/1/correctness/cpu/{sanitise_nodeid(NODEID)}"' in test_page
    assert "<strong>Known flaky</strong> until" in test_page


def test_the_test_page_says_known_flaky_only_as_the_job_was_judged(client: FlaskClient, settings: Settings,
                                                                    store: Store) -> None:
    for n, pr in enumerate((None, 8)):  # two flaky runs elsewhere: known flaky from now on
        evidence = seed_run(store, pr=pr, branch="main", sha=f"{n + 1}" * 40, age_minutes=300 - n * 100)
        _flaky(store, seed_job(settings, store, evidence, [SeededTest(NODEID, "passed")]).id)
    name = sanitise_nodeid(NODEID)

    # Judged when it was not known flaky yet (its job finished before the evidence): NEW, and no "warning" beside it.
    judged = seed_run(store, pr=9, sha="3" * 40, age_minutes=600)
    job = seed_job(settings, store, judged, [SeededTest(NODEID, "failed")])
    store.record_verdicts(job.id, 1, {NODEID: ("new_failure", "", False)})
    page = client.get(f"/jobs/{job.id}/tests/{name}").get_data(as_text=True)
    assert ">NEW<" in page and "Known flaky" not in page

    # Not judged against a base: its state as of the job's end, not today's.
    earlier = seed_run(store, pr=10, sha="4" * 40, age_minutes=500)
    job = seed_job(settings, store, earlier, [SeededTest(NODEID, "failed")])
    force_job(store, job.id, finished_at=utcnow() - timedelta(hours=7))
    assert "Known flaky" not in client.get(f"/jobs/{job.id}/tests/{name}").get_data(as_text=True)

    # Judged known flaky: the page says so, with the end date the check run gave.
    later = seed_run(store, pr=11, sha="5" * 40)
    job = seed_job(settings, store, later, [SeededTest(NODEID, "failed")])
    store.record_verdicts(job.id, 1, {NODEID: ("known_flaky", "known flaky: flaky in 2 runs", False)})
    page = client.get(f"/jobs/{job.id}/tests/{name}").get_data(as_text=True)
    assert ">KNOWN FLAKY<" in page and "<strong>Known flaky</strong> until" in page


def test_a_private_repositorys_history_asks_for_sign_in(client: FlaskClient, settings: Settings,
                                                         store: Store) -> None:
    run = seed_run(store, repo="octo/secret", pr=None, branch="main", private=True)
    seed_job(settings, store, run, [SeededTest(NODEID)])
    response = client.get(f"/tests/1/correctness/cpu/{sanitise_nodeid(NODEID)}")
    assert response.status_code == 302 and "/login" in response.headers["Location"]
    for path in ("/tests/1/correctness/cpu/nope", "/tests/99/correctness/cpu/x", "/tests/1/correct%20ness/cpu/x"):
        assert client.get(path).status_code in (302, 404)
