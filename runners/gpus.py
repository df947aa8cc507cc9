"""Which GPUs a worker's cuda jobs may use (COMPILE_CI_GPUS), and how that reaches a job.

A host with several GPUs runs one cuda worker per GPU (or per group), each with its own `COMPILE_CI_GPUS`; a job
then sees only its worker's GPUs, as device 0.., whatever runner starts it. cpu jobs see no GPU at all, so a cpu
suite never takes memory on a GPU a cuda job is using.
"""

from __future__ import annotations

import re

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
