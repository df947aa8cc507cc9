"""Planning: which (suite, device) jobs a run gets."""

from pathlib import Path

from service.jobs.planning import PlannedJob, builtin_suites, default_devices, plan_jobs, served_devices
from service.repo_config import RepoConfig, default_config


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
    assert [j.device for j in jobs] == ["cpu", "cuda"] and jobs[0].skip_reason is None
    reason = jobs[1].skip_reason or ""
    assert reason.startswith("Nothing ran: this repository's .compile-ci.toml asks for cuda") and "runs: cpu" in reason


def test_a_repository_without_config_gets_the_devices_a_live_worker_serves() -> None:
    served = served_devices(("cpu", "cuda"), frozenset({"cpu", "github"}))  # no cuda worker answered
    assert served == ("cpu",)
    absent = default_devices(default_config(("correctness",)), served, has_file=False)
    assert [(j.device, j.skip_reason) for j in plan_jobs(absent, served, max_minutes=60)] == [("cpu", None)]
    asked = default_devices(default_config(("correctness",)), served, has_file=True)  # [suites] devices said both
    assert [j.device for j in plan_jobs(asked, served, max_minutes=60)] == ["cpu", "cuda"]


def test_without_an_answer_from_the_workers_the_configured_devices_count() -> None:
    assert served_devices(("cpu", "cuda"), None) == ("cpu", "cuda")
    assert served_devices(("cpu", "cuda"), frozenset()) == ("cpu", "cuda")  # starting up: jobs wait in the queue


def test_builtin_suites_are_the_directories_with_tests(tmp_path: Path) -> None:
    for name, files in {"correctness": ["test_a.py"], "empty": ["notes.md"], "_private": ["test_x.py"]}.items():
        (tmp_path / name).mkdir()
        for file in files:
            (tmp_path / name / file).write_text("")
    assert builtin_suites(tmp_path) == ("correctness",)
