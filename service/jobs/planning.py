"""Planning: a repository config and a deployment's devices -> the jobs of a run (pure)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from service.repo_config import CONFIG_FILE, DEVICES, RepoConfig


@dataclass(frozen=True)
class PlannedJob:
    suite: str
    device: str
    timeout_s: int
    # Set when the job completes without running: the deployment has no runner for its device.
    skip_reason: str | None = None
    torch: str = ""  # a version other than the deployment's default (service/jobs/torch_matrix.py)
    advisory: bool = False  # that version is advisory: never red

    @property
    def runner(self) -> str:
        """The runner it needs, in words: `cpu runner`, `cpu runner for torch 2.14`."""
        return f"{self.device} runner for torch {self.torch}" if self.torch else f"{self.device} runner"


def builtin_suites(suites_dir: Path) -> tuple[str, ...]:
    """The suites this installation ships: directories of `suites/` holding test modules."""
    return tuple(sorted(
        d.name for d in suites_dir.iterdir()
        if d.is_dir() and not d.name.startswith(("_", ".")) and any(d.glob("test_*.py"))
    ))


def served_devices(configured: tuple[str, ...], live_queues: frozenset[str] | None) -> tuple[str, ...]:
    """The deployment's devices (COMPILE_CI_DEVICES) that a live worker consumes; all of them when nobody
    could be asked or no worker answered (a deployment starting up: its jobs wait in the queue)."""
    if live_queues is None:
        return configured
    return tuple(d for d in configured if d in live_queues) or configured


def default_devices(config: RepoConfig, served: tuple[str, ...], has_file: bool) -> RepoConfig:
    """A repository without a config file runs on the devices this deployment serves, not on every device."""
    return config if has_file else replace(config, devices=tuple(d for d in DEVICES if d in served))


def skip_reason(device: str, served: tuple[str, ...]) -> str:
    return (f"Nothing ran: this repository's {CONFIG_FILE} asks for {device} ([suites] devices), but no worker "
            f"of this deployment runs {device} jobs (it runs: {', '.join(served) or 'none'}). The check run is "
            f"neutral so that it does not block the pull request. Start a {device} worker (`compile-ci worker "
            f"--queues {device}`) and re-run, or leave {device} out of [suites] devices.")


def plan_jobs(config: RepoConfig, served_devices: tuple[str, ...], max_minutes: int) -> list[PlannedJob]:
    minutes = min(config.timeout_minutes, max_minutes)
    jobs = []
    for suite in config.suites:
        for device in DEVICES:
            if device not in config.devices:
                continue
            skip = None if device in served_devices else skip_reason(device, served_devices)
            jobs.append(PlannedJob(suite, device, minutes * 60, skip))
    return jobs
