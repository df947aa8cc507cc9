"""Planning: a repository config and a deployment's devices -> the jobs of a run (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from service.repo_config import DEVICES, RepoConfig


@dataclass(frozen=True)
class PlannedJob:
    suite: str
    device: str
    timeout_s: int
    # Set when the job completes without running: the deployment has no runner for its device.
    skip_reason: str | None = None


def builtin_suites(suites_dir: Path) -> tuple[str, ...]:
    """The suites this installation ships: directories of `suites/` holding test modules."""
    return tuple(sorted(
        d.name for d in suites_dir.iterdir()
        if d.is_dir() and not d.name.startswith(("_", ".")) and any(d.glob("test_*.py"))
    ))


def plan_jobs(config: RepoConfig, served_devices: tuple[str, ...], max_minutes: int) -> list[PlannedJob]:
    minutes = min(config.timeout_minutes, max_minutes)
    jobs = []
    for suite in config.suites:
        for device in DEVICES:
            if device not in config.devices:
                continue
            skip = None if device in served_devices else f"This deployment has no {device} runner."
            jobs.append(PlannedJob(suite, device, minutes * 60, skip))
    return jobs
