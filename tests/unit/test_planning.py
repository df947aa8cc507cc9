"""Planning: which (suite, device) jobs a run gets."""

import os
from pathlib import Path

import pytest

from runners.gpus import host_gpu_count
from service.planning.plan import (
    PlannedJob,
    builtin_suites,
    default_devices,
    job_queue,
    plan_jobs,
    served_devices,
    served_queues,
    worker_queues_problem,
)
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


def test_the_distributed_suite_on_cuda_waits_for_a_worker_with_two_gpus() -> None:
    assert [job_queue(suite, device) for suite, device in [
        ("distributed", "cuda"), ("distributed", "cpu"), ("correctness", "cuda"), ("correctness", "cpu")]] == [
        "cuda2", "cpu", "cuda", "cpu"]
    config = RepoConfig(suites=("correctness", "distributed"), devices=("cpu", "cuda"), timeout_minutes=10)
    two_gpus = served_queues(("cpu", "cuda"), frozenset({"cpu", "cuda", "cuda2", "github"}))
    assert two_gpus == ("cpu", "cuda", "cuda2")
    assert [(j.suite, j.device, j.queue, j.skip_reason) for j in plan_jobs(config, two_gpus, max_minutes=60)] == [
        ("correctness", "cpu", "cpu", None), ("correctness", "cuda", "cuda", None),
        ("distributed", "cpu", "cpu", None), ("distributed", "cuda", "cuda2", None)]


def test_without_a_two_gpu_worker_the_distributed_cuda_job_is_skipped_or_left_out() -> None:
    one_gpu = served_queues(("cpu", "cuda"), frozenset({"cpu", "cuda", "github"}))
    assert one_gpu == ("cpu", "cuda")
    config = RepoConfig(suites=("distributed",), devices=("cpu", "cuda"), timeout_minutes=10)
    cpu, cuda = plan_jobs(config, one_gpu, max_minutes=60)
    assert cpu.skip_reason is None and cuda.queue == "cuda2"
    assert "two GPUs of one host" in (cuda.skip_reason or "") and "--queues cuda2" in (cuda.skip_reason or "")
    # A repository without a config file asked for nothing: the job no worker can take is not shown at all.
    assert [(j.device, j.skip_reason) for j in plan_jobs(config, one_gpu, 60, has_file=False)] == [("cpu", None)]
    # Nobody answered (a deployment starting up): the job waits in the cuda2 queue like any other.
    assert served_queues(("cpu", "cuda"), None) == ("cpu", "cuda", "cuda2")
    assert served_queues(("cpu",), frozenset({"cpu", "cuda2"})) == ("cpu",)  # no cuda at all: cuda's own reason


def _never_asked() -> int:
    raise AssertionError("the host's GPUs are counted only when COMPILE_CI_GPUS is empty and cuda2 is asked for")


def test_a_two_gpu_worker_must_be_given_two_gpus() -> None:
    assert worker_queues_problem(["cuda2"], ("0", "1"), _never_asked) is None
    assert worker_queues_problem(["cuda", "cuda2"], (), lambda: 2) is None  # every GPU of the host: two
    assert worker_queues_problem(["cuda2"], (), lambda: 8) is None
    assert worker_queues_problem(["cuda"], ("1",), _never_asked) is None
    assert worker_queues_problem(["cuda", "cpu"], (), _never_asked) is None  # one GPU is enough for cuda
    assert "COMPILE_CI_GPUS gives this worker one (1)" in (worker_queues_problem(["cuda2"], ("1",), _never_asked)
                                                          or "")
    # COMPILE_CI_GPUS empty: every GPU of the host, and a host with one (or none) cannot run a two-rank job.
    for seen in (1, 0):
        said = worker_queues_problem(["cuda", "cuda2"], (), lambda seen=seen: seen) or ""
        assert f"--queues cuda2: its jobs run on two GPUs, but this host shows {seen}" in said
        assert "COMPILE_CI_GPUS=0,1" in said


def test_the_hosts_gpus_are_counted_from_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real executable named nvidia-smi on PATH, printing what the driver's prints on a MIG-split two-GPU host."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\n[ \"$1\" = -L ] || exit 9\n"
                   "echo 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0a1b2c3d-0000-1111-2222-333344445555)'\n"
                   "echo '  MIG 3g.40gb     Device  0: (UUID: MIG-0a1b2c3d-0000-1111-2222-333344445555)'\n"
                   "echo 'GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-9a1b2c3d-0000-1111-2222-333344445555)'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert host_gpu_count() == 2
    assert worker_queues_problem(["cuda2"], (), host_gpu_count) is None
