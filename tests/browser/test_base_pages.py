"""A pull request's run against its base, as a maintainer reads it: the test's generated code base → head (real
inductor output), outcomes and compile ledger side by side, the run pages linking each other, and the history
chart with the default branch as its baseline. Hostile artifacts (huge, binary, HTML, links out) included."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from service.config import Settings
from service.store import Job, Run, Store, TestResult
from suites.naming import sanitise_nodeid
from tests.browser.seed import SeededTest, seed_job, seed_run
from tests.inductor_pair import compiled_codes, write_codes
from tests.rows import force_run

NODEID = "correctness/test_correctness.py::test_model[mlp-<script>alert(1)</script>]"
NAME = sanitise_nodeid(NODEID)


def _folder(settings: Settings, job: Job) -> Path:
    return settings.artifacts_dir / job.run_id / job.id / "1" / "tests" / NAME


def set_metrics(settings: Settings, job: Job, **changes: object) -> None:
    path = _folder(settings, job) / "metrics.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def pr_with_base(settings: Settings, store: Store, base_codes: list[str], head_codes: list[str],
                 base_outcome: str = "passed", head_outcome: str = "passed") -> tuple[Run, Job, Run, Job]:
    """A push run of main at the base sha and a PR run naming it as its base, each with the test's code."""
    base_run = seed_run(store, pr=None, branch="main", sha="b" * 40, age_minutes=30)
    base_job = seed_job(settings, store, base_run, [SeededTest(NODEID, base_outcome, 0.4, 1.0)])
    write_codes(_folder(settings, base_job), base_codes)
    run = seed_run(store, pr=12, sha="c" * 40, age_minutes=5)
    run = force_run(store, run.id, base_sha="b" * 40, base_run_id=base_run.id)
    job = seed_job(settings, store, run, [SeededTest(NODEID, head_outcome, 0.5, 1.5)])
    for stale in _folder(settings, job).glob("output_code_*.py"):
        stale.unlink()
    write_codes(_folder(settings, job), head_codes)
    return base_run, base_job, run, job


def _page(client: FlaskClient, path: str) -> str:
    response = client.get(path)
    assert response.status_code == 200, (path, response.status_code)
    return response.get_data(as_text=True)


def test_a_changed_operation_shows_as_a_highlighted_diff_with_both_outcomes_and_ledgers(
        client: FlaskClient, settings: Settings, store: Store) -> None:
    codes = compiled_codes()
    base_run, base_job, run, job = pr_with_base(settings, store, codes["f"], codes["g"], head_outcome="failed")
    cold = {"fx_graph_cache_hits": 0, "fx_graph_cache_misses": 1}  # both compiled: compile times compare
    set_metrics(settings, base_job, graph_breaks=0, graph_break_reasons=["an old reason"], **cold)
    set_metrics(settings, job, graph_breaks=1, graph_break_reasons=["call_function print <b>side effect</b>"], **cold)
    page = _page(client, f"/jobs/{job.id}/tests/{NAME}/diff")
    assert "Generated code changed in 1 of 1 graph." in page
    assert "output_code_0.py → output_code_0.py" in page
    # Pygments' diff tokens: deleted (gd) lines hold sin, inserted (gi) cos; the AOT counter is no change
    deleted = re.findall(r'<span class="gd">([^<]*)</span>', page)
    inserted = re.findall(r'<span class="gi">([^<]*)</span>', page)
    assert any("sin()" in line for line in deleted) and any("cos()" in line for line in inserted)
    assert not any("AOT ID" in line for line in deleted + inserted)
    assert re.search(r'id="base-outcome"><span class="passed">passed', page)
    assert re.search(r'id="head-outcome"><span class="failed">failed', page)
    assert re.search(r"<th>compile time</th><td[^>]*>1.00 s</td><td[^>]*>1.50 s</td><td[^>]*>×1.50", page)
    assert re.search(r"<th>graph breaks</th><td[^>]*>0</td><td[^>]*>1</td><td[^>]*>\+1", page)
    assert "(new) call_function print &lt;b&gt;side effect&lt;/b&gt;" in page and "(gone at head) an old reason" in page
    assert 'class="num failed">+1</td>' in page  # a rise is red
    assert "Recompile reasons" not in page  # neither side recorded any
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)" in page
    assert f'href="/runs/{base_run.id}"' in page and f'href="/jobs/{base_job.id}/tests/{NAME}"' in page
    # linked from the test page and the job page
    assert f'id="compare" href="/jobs/{job.id}/tests/{NAME}/diff"' in _page(client, f"/jobs/{job.id}/tests/{NAME}")
    job_page = _page(client, f"/jobs/{job.id}")
    assert f'href="/jobs/{job.id}/tests/{NAME}/diff">vs base</a>' in job_page
    assert f'<a href="/jobs/{base_job.id}">correctness (cpu) in the base run</a>' in job_page
    # an attempt's own pages link the diff under the attempt's prefix
    assert "Generated code changed" in _page(client, f"/jobs/{job.id}/attempts/1/tests/{NAME}/diff")


def test_the_same_code_compiled_again_is_identical_and_green(client: FlaskClient, settings: Settings,
                                                            store: Store) -> None:
    codes = compiled_codes()
    *_, job = pr_with_base(settings, store, codes["f"], codes["f_again"])
    page = _page(client, f"/jobs/{job.id}/tests/{NAME}/diff")
    assert "Identical to the base: 1 graph" in page and 'class="gd"' not in page


def test_the_same_graphs_loaded_warm_in_another_order_are_identical_and_times_not_compared(
        client: FlaskClient, settings: Settings, store: Store) -> None:
    first, second = compiled_codes()["two_graphs"]
    _, base_job, _, job = pr_with_base(settings, store, [first, second], [second, first])
    set_metrics(settings, base_job, compile_time_s=19.4, fx_graph_cache_hits=0, fx_graph_cache_misses=2)
    set_metrics(settings, job, compile_time_s=1.45, fx_graph_cache_hits=2, fx_graph_cache_misses=0)
    page = _page(client, f"/jobs/{job.id}/tests/{NAME}/diff")
    assert "Identical to the base: 2 graphs" in page and 'class="gd"' not in page
    assert re.search(r"output_code_1.py → output_code_0.py\s*<span class=\"badge identical\">identical", page)
    assert re.search(r"<th>compile cache</th><td[^>]*>cold: 2 compiled</td><td[^>]*>warm: 2 from the cache</td>",
                     page)
    assert re.search(r"<th>compile time</th><td[^>]*>19.40 s</td><td[^>]*>1.45 s</td>"
                     r"<td class=\"num\">not compared: cached differently</td>", page)


def test_a_graph_break_pairs_the_graphs_and_marks_the_new_one(client: FlaskClient, settings: Settings,
                                                              store: Store) -> None:
    first, second = compiled_codes()["two_graphs"]
    *_, job = pr_with_base(settings, store, [second], [first, second])
    page = _page(client, f"/jobs/{job.id}/tests/{NAME}/diff")
    assert "Generated code changed in 1 of 2 graphs." in page
    assert re.search(r"\(none\) → output_code_0.py\s*<span class=\"badge added\">only at head", page)
    assert re.search(r"output_code_0.py → output_code_1.py\s*<span class=\"badge identical\">identical", page)


def test_without_a_base_result_the_page_says_why(client: FlaskClient, settings: Settings, store: Store) -> None:
    codes = compiled_codes()
    plain = seed_job(settings, store, seed_run(store, pr=3, sha="d" * 40), [SeededTest(NODEID)])
    assert "This run has no base" in _page(client, f"/jobs/{plain.id}/tests/{NAME}/diff")
    assert 'id="compare"' not in _page(client, f"/jobs/{plain.id}/tests/{NAME}")
    assert "vs base" not in _page(client, f"/jobs/{plain.id}")

    zeros = force_run(store, seed_run(store, pr=6, sha="6" * 40).id, base_sha="0" * 40)  # GitHub's "no commit"
    zero_job = seed_job(settings, store, zeros, [SeededTest(NODEID)])
    assert "This run has no base" in _page(client, f"/jobs/{zero_job.id}/tests/{NAME}/diff")
    assert 'id="run-base"' not in _page(client, f"/runs/{zeros.id}")
    assert "vs base" not in _page(client, f"/jobs/{zero_job.id}")

    waiting = seed_run(store, pr=4, sha="e" * 40)
    force_run(store, waiting.id, base_sha="f" * 40)
    job = seed_job(settings, store, waiting, [SeededTest(NODEID)])
    page = _page(client, f"/jobs/{job.id}/tests/{NAME}/diff")
    assert "No base result." in page and "No run of the base commit ffffffffffff yet." in page
    assert "no run of the base commit yet" in _page(client, f"/runs/{waiting.id}")

    base_run, base_job, run, job = pr_with_base(settings, store, codes["f"], codes["g"])
    other = sanitise_nodeid("correctness/test_correctness.py::test_new")
    (_folder(settings, job).parent / other).mkdir()
    assert "no result for this test" in _page(client, f"/jobs/{job.id}/tests/{other}/diff")


def test_a_push_run_serves_as_the_base_of_pr_runs_at_its_sha(client: FlaskClient, settings: Settings,
                                                            store: Store) -> None:
    codes = compiled_codes()
    base_run, _base_job, run, job = pr_with_base(settings, store, codes["f"], codes["g"])
    later = force_run(store, seed_run(store, pr=13, sha="9" * 40).id, base_sha="b" * 40)  # no base run chosen yet
    run_page = _page(client, f"/runs/{run.id}")
    assert f'id="base-run-link" href="/runs/{base_run.id}">the base\'s push run</a>' in run_page
    assert f'/commit/{"b" * 40}"><code>bbbbbbbbbbbb</code>' in run_page
    base_page = _page(client, f"/runs/{base_run.id}")
    assert "The base of 2 pull-request runs" in base_page
    assert f'href="/runs/{run.id}">PR #12' in base_page and f'href="/runs/{later.id}">PR #13' in base_page
    # the stand-in push run compares PR #13 too, and another repository's run is never a base
    later_job = seed_job(settings, store, later, [SeededTest(NODEID)])
    write_codes(_folder(settings, later_job), codes["f_again"])
    assert "Identical to the base" in _page(client, f"/jobs/{later_job.id}/tests/{NAME}/diff")
    stranger = seed_run(store, repo="other/repo", pr=None, branch="main", sha="b" * 40)
    force_run(store, run.id, base_run_id=stranger.id, base_sha="0" * 40)
    assert "No run of the base commit 000000000000 yet." in _page(client, f"/jobs/{job.id}/tests/{NAME}/diff")


@pytest.mark.parametrize("path", [
    "/jobs/{job}/tests/../diff", "/jobs/{job}/tests/%2e%2e/diff", "/jobs/{job}/tests/..%2f..%2fdata/diff",
    "/jobs/{job}/tests/{name}%00/diff", "/jobs/{job}/tests/.hidden/diff", "/jobs/{job}/tests/{name}/diff%0a",
    "/jobs/{job}/attempts/99/tests/{name}/diff", "/jobs/{job}/tests/nonexistent/diff",
])
def test_path_tricks_in_the_test_name_answer_404(client: FlaskClient, settings: Settings, store: Store,
                                                 path: str) -> None:
    codes = compiled_codes()
    *_, job = pr_with_base(settings, store, codes["f"], codes["g"])
    assert client.get(path.format(job=job.id, name=NAME)).status_code == 404


def test_hostile_code_files_are_cut_escaped_or_refused(client: FlaskClient, settings: Settings,
                                                       store: Store) -> None:
    codes = compiled_codes()
    _base_run, base_job, _run, job = pr_with_base(settings, store, codes["f"] * 4, codes["g"])
    head, base = _folder(settings, job), _folder(settings, base_job)
    (head / "output_code_1.py").write_text("x = '</pre><script>alert(2)</script>'\n" * 150_000)  # 5.6 MB
    (head / "output_code_2.py").write_bytes(b"\x7fELF\x00\x01" * 1000)
    (head / "output_code_3.py").symlink_to("/etc/passwd")
    os.mkfifo(head / "output_code_4.py")  # opening a FIFO would hang the page
    for index in range(5, 9):  # four more files at the 256 KiB cap: the last one is past the side's 1 MiB
        (head / f"output_code_{index}.py").write_text(f"y{index} = 0\n" * 40_000)
    (base / "output_code_3.py").unlink()
    (base / "output_code_3.py").symlink_to(settings.database_url.removeprefix("sqlite:///"))
    set_metrics(settings, job, compile_time_s="fast", graphs=[1], graph_break_reasons={"not": "a list"},
             recompile_reasons=["r" * 10_000, 7, None, {"x": 1}] + ["again"] * 80)
    page = _page(client, f"/jobs/{job.id}/tests/{NAME}/diff")
    assert "<script>alert(2)" not in page and "&lt;/pre&gt;&lt;script&gt;" in page
    assert len(page) < 3_000_000 and "Cut: files are compared up to 256 KiB" in page
    assert "not text: not compared" in page
    assert page.count("past the page's 1024 KiB of code: not compared") == 1
    assert "root:x:" not in page and "SQLite" not in page
    assert re.search(r'<th>compile time</th><td class="num">1.00 s</td><td class="num">—</td>', page)  # "fast"
    assert "and 32 more" in page and "r" * 2001 not in page  # 82 reasons kept as text, 50 shown, each cut
    assert _page(client, f"/jobs/{job.id}/tests/{NAME}").count("output_code_") >= 1  # the test page survives too
    assert "root:x:" not in _page(client, f"/jobs/{job.id}/tests/{NAME}")


def test_history_chart_draws_the_default_branch_as_baseline_and_this_prs_runs(
        client: FlaskClient, settings: Settings, store: Store) -> None:
    pushes = [seed_run(store, pr=None, branch="main", sha=f"{n}" * 40, age_minutes=60 - n) for n in range(3)]
    for n, push in enumerate(pushes):
        seed_job(settings, store, push, [SeededTest(NODEID, "passed", 1.0 + n, 0.5)])
    base_only = seed_run(store, pr=99, sha="8" * 40, age_minutes=50)  # a base run compile-ci scheduled
    seed_job(settings, store, base_only, [SeededTest(NODEID, "passed", 1.1, 0.6)])
    other_pr = seed_job(settings, store, seed_run(store, pr=5, sha="7" * 40, age_minutes=40),
                        [SeededTest(NODEID, "failed", 77.0, 0.5)])
    first = seed_run(store, pr=12, sha="a" * 40, age_minutes=20)
    seed_job(settings, store, first, [SeededTest(NODEID, "failed", 3.0, 2.0)])
    head = seed_run(store, pr=12, sha="c" * 40, age_minutes=5)
    force_run(store, head.id, base_sha="2" * 40, base_run_id=pushes[2].id)
    force_run(store, first.id, base_sha="8" * 40, base_run_id=base_only.id)
    job = seed_job(settings, store, head, [SeededTest(NODEID, "passed", 2.5, 1.2)])
    page = _page(client, f"/jobs/{job.id}/tests/{NAME}")
    assert "History (6 recent runs of octo/zoo: the default branch and PR #12)" in page
    assert page.count('<polyline class="baseline"') == 2 and page.count('<polyline class="own"') == 2
    assert page.count("· default branch</title>") == 8 and page.count("· PR #12</title>") == 4
    assert re.search(r'<circle class="point failed"[^>]*fill="#cf222e"[^>]*><title>duration 3.000 s · aaaaaaaa', page)
    assert "77.000" not in page and other_pr.id not in page  # another pull request's runs are not drawn
    assert ">seconds</text>" in page and ">runs of this test, oldest to newest</text>" in page
    assert 'class="legend-baseline"' in page and ">PR #12</text>" in page
    push_job = f"{pushes[2].id}-correctness-cpu"  # a push run: the default branch, and itself as "this run"
    push_page = _page(client, f"/jobs/{push_job}/tests/{NAME}")
    assert push_page.count("· default branch</title>") == 6 and push_page.count("· this run</title>") == 2


@pytest.mark.skipif(not hasattr(TestResult, "verdict"), reason="the base-judge's test_results.verdict column")
def test_the_stored_verdict_is_a_badge_on_the_test_and_diff_pages(client: FlaskClient, settings: Settings,
                                                                 store: Store) -> None:
    codes = compiled_codes()
    *_, job = pr_with_base(settings, store, codes["f"], codes["g"], base_outcome="failed", head_outcome="failed")
    for path in (f"/jobs/{job.id}/tests/{NAME}", f"/jobs/{job.id}/tests/{NAME}/diff"):
        assert 'id="verdict"' not in _page(client, path)  # not judged yet
    with store.session() as s:
        for row in s.query(TestResult).filter(TestResult.job_id == job.id):
            row.verdict = "failing_at_base"
    for path in (f"/jobs/{job.id}/tests/{NAME}", f"/jobs/{job.id}/tests/{NAME}/diff"):
        badge = '<span class="badge verdict b-at-base" id="verdict">AT BASE</span>'
        assert badge in _page(client, path)


def test_a_base_run_is_named_as_such_not_as_a_push_to_an_empty_branch(
        client: FlaskClient, settings: Settings, store: Store) -> None:
    base = seed_run(store, pr=None, branch="", sha="d" * 40, age_minutes=20)
    force_run(store, base.id, trigger="base")
    seed_job(settings, store, base, [SeededTest(NODEID, "passed", 0.4, 1.0)])
    listing = _page(client, "/")
    assert "base run" in listing and "push to </td>" not in listing
    assert f"@base {'d' * 12}" in _page(client, f"/runs/{base.id}")
