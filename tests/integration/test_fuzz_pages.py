"""Fuzzing every page's path parameters and query strings (hypothesis, derandomized): never a 5xx.

The ids are sometimes the real ones, so the fuzzed file paths, test names and page numbers reach the code
that opens files, not only the id check in front of it.
"""

from __future__ import annotations

from urllib.parse import quote, urlencode

import pytest
from flask.testing import FlaskClient
from hypothesis import HealthCheck, given
from hypothesis import settings as fuzz_settings
from hypothesis import strategies as st

from service.config import Settings
from service.store import Job, NewRun, Store, TestRecord
from service.web.app import create_app
from tests.rows import force_run

FUZZ = fuzz_settings(max_examples=150, derandomize=True, database=None, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
ROUTES = ["/", "/runs/{run}", "/jobs/{job}", "/jobs/{job}/artifacts", "/jobs/{job}/log", "/jobs/{job}/log/live",
          "/jobs/{job}/files/{path}", "/jobs/{job}/download.zip", "/jobs/{job}/tests/{name}",
          "/jobs/{job}/tests/{name}/diff", "/status", "/login",
          "/oauth/callback", "/webhook", "/jobs/{job}/log/hits", "/jobs/{job}/log/search", "/jobs/{job}/repro.json",
          "/jobs/{job}/wheels/{name}"]
QUERY_KEYS = ["page", "line", "offset", "pr", "repo", "branch", "sha", "status", "next", "state", "code", "q"]


@pytest.fixture
def client(settings: Settings) -> FlaskClient:
    return create_app(settings).test_client()


@pytest.fixture
def job(settings: Settings) -> Job:
    store = Store(settings.database_url)
    run, _ = store.create_run_if_absent(NewRun(
        repo_full_name="octo/zoo", repo_id=1, installation_id=2, clone_url="file:///nowhere", private=False,
        trigger="pull_request", trigger_ref="pr/1", pr_number=1, branch="b", head_sha="a" * 40, sender="octocat"))
    force_run(store, run.id, base_sha="b" * 40, base_run_id="0" * 16)  # a base not run yet: the diff page says so
    job = Job(id=f"{run.id}-correctness-cpu", run_id=run.id, suite="correctness", device="cpu", timeout_s=60,
              attempt=1, state="completed", conclusion="failure", passed=1, failed=0, skipped=0, errors=0,
              title="1 passed", detail="", reported="")
    store.add_jobs_if_absent([job])
    out = settings.artifacts_dir / run.id / job.id / "1"
    (out / "tests" / "test_ok").mkdir(parents=True)
    (out / "log.txt").write_text("line\n" * 50)
    (out / "tests" / "test_ok" / "metrics.json").write_text('{"nodeid": "test_ok"}')
    store.replace_results(job.id, 1, [TestRecord(nodeid="test_ok", outcome="passed", duration_s=0.5)])
    store.replace_artifacts(job.id, 1, [(str(p.relative_to(out)), p.stat().st_size)
                                        for p in sorted(out.rglob("*")) if p.is_file()])
    return job


# Percent-encoding the UTF-8 bytes (surrogates kept as such) delivers any code point, NUL and broken UTF-8 included.
anything = st.text(st.characters(exclude_categories=()), max_size=40)
tricky = st.sampled_from(["", ".", "..", "../..", "log.txt\x00.png", "log.txt", "tests/test_ok/metrics.json",
                          "%00", "\ud800", "a\nb", "9" * 30, "\u00b2", "-1", "1e9", "/etc/passwd", "~"])
value = st.one_of(anything, tricky, st.integers(min_value=-(10**30), max_value=10**30).map(str))


def _encoded(text: str, safe: str = "") -> str:
    return quote(text.encode("utf-8", "surrogatepass"), safe=safe)


@st.composite
def page_request(draw: st.DrawFn, run_id: str, job_id: str) -> str:
    route = draw(st.sampled_from(ROUTES))
    path = route.format(
        run=draw(st.one_of(st.just(run_id), value.map(_encoded))),
        job=draw(st.one_of(st.just(job_id), value.map(_encoded))),
        path=draw(st.one_of(tricky, value).map(lambda text: _encoded(text, safe="/"))),
        name=draw(st.one_of(st.just("test_ok"), value.map(_encoded))),
    )
    query = draw(st.dictionaries(st.sampled_from(QUERY_KEYS), value, max_size=3))
    return path + ("?" + urlencode(query, errors="surrogatepass") if query else "")


def test_pages_never_500(client: FlaskClient, job: Job) -> None:
    @FUZZ
    @given(page_request(job.run_id, job.id))
    def visit(url: str) -> None:
        response = client.get(url)
        # 503 is /login's own answer while sign-in is not configured, not a fault.
        assert response.status_code < 500 or (url.startswith("/login") and response.status_code == 503), url
        response.close()

    visit()


@pytest.mark.parametrize("path", ["log.txt%00.png", "%00", "log.txt%00", "tests/%00/x"])
def test_a_nul_in_a_file_path_is_404(client: FlaskClient, job: Job, path: str) -> None:
    assert client.get(f"/jobs/{job.id}/files/{path}").status_code == 404


@pytest.mark.parametrize("query", ["page=%C2%B2", "line=%C2%B2", "page=" + "9" * 5000, "line=" + "9" * 5000])
def test_odd_numbers_in_queries_fall_back_to_the_default(client: FlaskClient, job: Job, query: str) -> None:
    assert client.get(f"/jobs/{job.id}/log?{query}").status_code in (200, 302)
    assert client.get(f"/?{query.replace('line', 'pr')}").status_code == 200


def test_a_non_ascii_oauth_state_is_refused_not_a_500(client: FlaskClient) -> None:
    with client.session_transaction() as session:
        session["oauth_state"] = "started-here"
    assert client.get("/oauth/callback?state=%C3%A9&code=x").status_code == 400
