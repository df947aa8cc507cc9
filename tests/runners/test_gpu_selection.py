"""A worker's GPUs (COMPILE_CI_GPUS) reach its cuda jobs, and only them; cpu jobs see no GPU.

On a host with several GPUs each cuda worker owns one (or a group), so two jobs never compile and measure on the
same card. The GPU itself is exercised by the GPU sandbox (scripts/gpu-sandbox.sh); here: what each runner asks for.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from runners.docker_container import container_config
from runners.gpus import GPU_JOB_ENV, parse_gpus, visible_devices
from runners.local import LocalRunner
from runners.protocol import RunSpec
from service.config import ConfigError, Settings
from tests.runners.test_docker_runner import pipeline_like_spec

BASE_ENV = {"COMPILE_CI_WEBHOOK_SECRET": "s", "COMPILE_CI_GITHUB_APP_ID": "1",
            "COMPILE_CI_GITHUB_PRIVATE_KEY": "-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----"}


def test_gpus_are_indexes_or_uuids() -> None:
    assert parse_gpus("") == ()
    assert parse_gpus(" 1, 3 ") == ("1", "3")
    assert parse_gpus("GPU-5f3c2a1b-0000-1111-2222-333344445555") == ("GPU-5f3c2a1b-0000-1111-2222-333344445555",)
    for bad in ("all", "1;rm -rf /", "-1", "0,0"):
        with pytest.raises(ValueError):
            parse_gpus(bad)


def test_a_malformed_setting_is_a_configuration_error() -> None:
    assert Settings.from_env({**BASE_ENV, "COMPILE_CI_GPUS": "1,2"}).gpus == ("1", "2")
    with pytest.raises(ConfigError, match="COMPILE_CI_GPUS"):
        Settings.from_env({**BASE_ENV, "COMPILE_CI_GPUS": "first"})


def test_cpu_jobs_see_no_gpu_and_cuda_jobs_see_the_workers() -> None:
    assert visible_devices("cpu", ("1",)) == ""
    assert visible_devices("cuda", ("1", "2")) == "1,2"
    assert visible_devices("cuda", ()) is None  # every GPU: the host's own setting stands


def test_the_docker_runner_asks_the_engine_for_exactly_the_workers_gpus(tmp_path: Path) -> None:
    (request,) = container_config(pipeline_like_spec(tmp_path, "cuda"), "img", gpus=("1",))["device_requests"]
    assert request["DeviceIDs"] == ["1"] and request["Capabilities"] == [["gpu"]] and request["Count"] == 0
    (every,) = container_config(pipeline_like_spec(tmp_path, "cuda"), "img")["device_requests"]
    assert every["Count"] == -1


def test_cuda_jobs_run_with_nvlink_multicast_off_in_either_runner(tmp_path: Path) -> None:
    cuda = container_config(pipeline_like_spec(tmp_path, "cuda"), "img")["environment"]
    assert {key: cuda[key] for key in GPU_JOB_ENV} == GPU_JOB_ENV == {
        "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
    assert not set(GPU_JOB_ENV) & set(container_config(pipeline_like_spec(tmp_path, "cpu"), "img")["environment"])


@pytest.mark.parametrize(("device", "expected"), [("cuda", "1"), ("cpu", "")])
def test_the_local_runner_pins_the_job_to_the_workers_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          device: str, expected: str) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")  # the host's own setting: the worker narrows it
    out = tmp_path / "out"
    code = "import json, os; json.dump(dict(os.environ), open(os.environ['COMPILE_CI_OUTPUT_DIR'] + '/env.json', 'w'))"
    spec = RunSpec(job_id=f"gpu-{device}", command=(LocalRunner().python, "-c", code), checkout_dir=tmp_path,
                   output_dir=out, timeout_s=60, env={"COMPILE_CI_OUTPUT_DIR": str(out), "NCCL_NVLS_ENABLE": "1"},
                   device=device)
    assert LocalRunner(gpus=("1",)).run(spec).exit_code == 0
    seen = json.loads((out / "env.json").read_text())
    assert seen["CUDA_VISIBLE_DEVICES"] == expected
    # Multicast off for a cuda job even where the job's own variables said otherwise; a cpu job is left alone.
    left_alone = {**dict.fromkeys(GPU_JOB_ENV), "NCCL_NVLS_ENABLE": "1"}
    assert {key: seen.get(key) for key in GPU_JOB_ENV} == (GPU_JOB_ENV if device == "cuda" else left_alone)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"  # the worker's own environment is unchanged
