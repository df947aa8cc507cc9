"""A real job's log through webhook -> Celery worker -> LocalRunner: the command, then the sections the install
step and the suites' plugin mark, each test's id as it ran (pytest -v), the times beside the log, not in it; and the
log page folding those sections with their durations."""

from __future__ import annotations

import re
from pathlib import Path

from service.config import Settings
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.sandbox.sample_repo import commit_file
from service.store import Store, job_id_of_external
from service.web.app import create_app
from tests.integration.test_install import PYPROJECT
from tests.integration.test_pipeline import await_check_runs, open_pr, repo, suites_dir, worker  # noqa: F401

SECTIONS = ["Install the repository (pip install -e . --no-deps --no-index)", "Collect tests", "Run tests", "Results"]


def test_a_jobs_log_has_its_sections_test_ids_and_times(settings: Settings, repo: Path,  # noqa: F811
                                                        worker: None, emulator: GitHubEmulator) -> None:  # noqa: F811
    commit_file(repo, "package", "pyproject.toml", PYPROJECT.replace('dependencies = ["tinydep"]', ""), "a package")
    sha = commit_file(repo, "package", "widgets/__init__.py", "", "its code")
    open_pr(settings, 7, sha, "package")
    (check_run,) = await_check_runs(emulator, sha, 1)
    assert check_run["conclusion"] == "success", check_run["output"]
    job = Store(settings.database_url).get_job(job_id_of_external(check_run["external_id"]))
    assert job is not None
    out = settings.artifacts_dir / job.run_id / job.id / "1"
    raw = (out / "log.txt").read_text()
    first, command = raw.splitlines()[:2]  # which tests run and why, then the command
    assert first == "compile-ci: every test runs: this pull request has no base job to take results from", raw
    assert command.startswith("$ ") and not re.search(r"^\d\d:\d\d:\d\d", raw, re.M)  # the download stays plain
    assert [line.removeprefix("::group::") for line in raw.splitlines() if line.startswith("::group::")] == SECTIONS
    assert re.search(r"^\S*test_tiny.py::test_always_passes PASSED", raw, re.M), raw  # not a row of dots
    assert (out / "log.times").stat().st_size > 0

    client = create_app(settings).test_client()
    page = client.get(f"/jobs/{job.id}/log").get_data(as_text=True)
    titles = re.findall(r'<summary class="l g" id="L\d+">.*?<span class="title">(.*?)</span>'
                        r' <em class="took">([^<]+)</em>', page)
    assert [title for title, _took in titles] == SECTIONS, page[-3000:]
    assert all(re.fullmatch(r"[0-9.]+ s|\d+ m \d\d s", took) for _title, took in titles)
    assert page.count('<time class="t"') >= raw.count("\n") - raw.count("::endgroup::")
    # The times are the log viewer's, not an artifact of the job.
    assert "log.times" not in client.get(f"/jobs/{job.id}/artifacts").get_data(as_text=True)
