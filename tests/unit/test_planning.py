"""Planning: which (suite, device) jobs a run gets."""

from pathlib import Path

from service.jobs.planning import PlannedJob, builtin_suites, plan_jobs
from service.repo_config import RepoConfig


def test_one_job_per_suite_and_device_with_the_timeout_capped() -> None:
    config = RepoConfig(suites=("correctness", "fusion"), devices=("cpu", "cuda"), timeout_minutes=90)
    assert plan_jobs(config, ("cpu", "cuda"), max_minutes=60) == [
        PlannedJob("correctness", "cpu", 3600),
        PlannedJob("correctness", "cuda", 3600),
        PlannedJob("fusion", "cpu", 3600),
        PlannedJob("fusion", "cuda", 3600),
    ]


def test_devices_without_runners_are_planned_as_skipped_not_left_queued() -> None:
    config = RepoConfig(suites=("correctness",), devices=("cuda", "cpu"), timeout_minutes=10)
    jobs = plan_jobs(config, ("cpu",), max_minutes=60)
    assert [(j.device, j.skip_reason) for j in jobs] == [
        ("cpu", None), ("cuda", "This deployment has no cuda runner."),
    ]


def test_builtin_suites_are_the_directories_with_tests(tmp_path: Path) -> None:
    for name, files in {"correctness": ["test_a.py"], "empty": ["notes.md"], "_private": ["test_x.py"]}.items():
        (tmp_path / name).mkdir()
        for file in files:
            (tmp_path / name / file).write_text("")
    assert builtin_suites(tmp_path) == ("correctness",)
