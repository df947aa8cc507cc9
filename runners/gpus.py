"""Which GPUs a worker's cuda jobs may use (COMPILE_CI_GPUS), and how that reaches a job.

A host with several GPUs runs one cuda worker per GPU (or per group), each with its own `COMPILE_CI_GPUS`; a job
then sees only its worker's GPUs, as device 0.., whatever runner starts it. cpu jobs see no GPU at all, so a cpu
suite never takes memory on a GPU a cuda job is using.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

# NVLink multicast (NCCL's NVLS, PyTorch's symmetric memory, NVSHMEM) stays off in every cuda job, whatever runner
# starts it: on a GPU host that others share, a program using it can put every GPU of the host out of service. Plain
# NCCL rings and trees over NVLink or PCIe need none of it (the distributed suite's two ranks use those).
GPU_JOB_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}

_GPU = re.compile(r"^(\d{1,3}|GPU-[0-9a-fA-F-]{8,64}|MIG-[0-9a-zA-Z/-]{8,80})$")


def parse_gpus(value: str) -> tuple[str, ...]:
    """`"0"`, `"1,3"` or GPU/MIG UUIDs, comma-separated; empty = every GPU of the host. ValueError when malformed."""
    items = tuple(part.strip() for part in value.split(",") if part.strip())
    bad = [item for item in items if not _GPU.match(item)]
    if bad:
        raise ValueError(f"not a GPU index or UUID: {', '.join(bad)}")
    if len(set(items)) != len(items):
        raise ValueError("a GPU is listed twice")
    return items


def visible_devices(device: str, gpus: tuple[str, ...]) -> str | None:
    """CUDA_VISIBLE_DEVICES for a job on `device`: none for cpu, the worker's GPUs for cuda; None = leave as is."""
    if device != "cuda":
        return ""
    return ",".join(gpus) if gpus else None


def gpu_job_env(device: str) -> dict[str, str]:
    """Variables every job on `device` gets after its own (so a job cannot turn them back on): GPU_JOB_ENV for cuda."""
    return dict(GPU_JOB_ENV) if device == "cuda" else {}


def host_gpu_count() -> int:
    """The GPUs this host shows a worker: `nvidia-smi -L`'s GPU lines where it runs, else the /dev/nvidiaN nodes."""
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            listed = None
        if listed is not None and listed.returncode == 0:
            return sum(1 for line in listed.stdout.splitlines() if line.startswith("GPU "))
    return sum(1 for node in Path("/dev").glob("nvidia*") if re.fullmatch(r"nvidia[0-9]+", node.name))
