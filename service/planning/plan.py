"""Planning: a repository config and a deployment's devices -> the jobs of a run (pure)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from service.repo_config import CONFIG_FILE, DEVICES, RepoConfig

# A suite whose cuda jobs need two GPUs of one host waits in its own queue, which only a worker given two GPUs
# (COMPILE_CI_GPUS=0,1) consumes; its cpu jobs run on the cpu queue like any other (two ranks on the CPU).
MULTI_GPU_QUEUE = "cuda2"
MULTI_GPU_SUITES = frozenset({"distributed"})


def job_queue(suite: str, device: str) -> str:
    """The Celery queue a (suite, device) job waits in: its device's, or cuda2 for a multi-GPU suite on cuda."""
    return MULTI_GPU_QUEUE if device == "cuda" and suite in MULTI_GPU_SUITES else device


def ops_scope(trigger: str) -> str:
    """The ops sweep's scope (suites/ops/aim.py): every op on the default branch (a push, which pull requests are
    later judged against) and on the daily canary; the ops the change touches on a pull request or its base run
    (both aim the same way: at what the repository changes in inductor)."""
    return "all" if trigger in ("push", "canary") else "aimed"


def worker_queues_problem(queues: list[str], gpus: tuple[str, ...], host_gpus: Callable[[], int]) -> str | None:
    """Why a worker may not consume these queues with these GPUs (COMPILE_CI_GPUS; empty: every GPU of the host,
    as many as `host_gpus()` counts, asked only then)."""
    if MULTI_GPU_QUEUE not in queues:
        return None
    if len(gpus) == 1:
        return (f"--queues {MULTI_GPU_QUEUE}: its jobs run on two GPUs, but COMPILE_CI_GPUS gives this worker one "
                f"({gpus[0]}); give it two (COMPILE_CI_GPUS=0,1) or leave it empty for every GPU of the host")
    if not gpus and (seen := host_gpus()) < 2:
        return (f"--queues {MULTI_GPU_QUEUE}: its jobs run on two GPUs, but this host shows {seen} (nvidia-smi -L, "
                f"else /dev/nvidiaN) and COMPILE_CI_GPUS is empty; run it on a host with two, or name two that the "
                f"runner can reach (COMPILE_CI_GPUS=0,1)")
    return None


@dataclass(frozen=True)
class PlannedJob:
    suite: str
    device: str
    timeout_s: int
    # Set when the job completes without running: the deployment has no runner for its device.
    skip_reason: str | None = None
    torch: str = ""  # a version other than the deployment's default (service/planning/torch_matrix.py)
    advisory: bool = False  # that version is advisory: never red

    @property
    def runner(self) -> str:
        """The runner it needs, in words: `cpu runner`, `cuda2 runner`, `cpu runner for torch 2.14`."""
        return f"{self.queue} runner for torch {self.torch}" if self.torch else f"{self.queue} runner"

    @property
    def queue(self) -> str:
        return job_queue(self.suite, self.device)


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


def served_queues(configured: tuple[str, ...], live_queues: frozenset[str] | None) -> tuple[str, ...]:
    """The served devices' queues, and cuda2 where a live worker consumes it (or, as above, nobody answered)."""
    devices = served_devices(configured, live_queues)
    two_gpus = "cuda" in devices and (not live_queues or MULTI_GPU_QUEUE in live_queues)
    return devices + ((MULTI_GPU_QUEUE,) if two_gpus else ())


def default_devices(config: RepoConfig, served: tuple[str, ...], has_file: bool) -> RepoConfig:
    """A repository without a config file runs on the devices this deployment serves, not on every device."""
    return config if has_file else replace(config, devices=tuple(d for d in DEVICES if d in served))


def skip_reason(device: str, served: tuple[str, ...]) -> str:
    return (f"Nothing ran: this repository's {CONFIG_FILE} asks for {device} ([suites] devices), but no worker "
            f"of this deployment runs {device} jobs (it runs: {', '.join(served) or 'none'}). The check run is "
            f"neutral so that it does not block the pull request. Start a {device} worker (`compile-ci worker "
            f"--queues {device}`) and re-run, or leave {device} out of [suites] devices.")


def multi_gpu_skip_reason(suite: str) -> str:
    return (f"Nothing ran: the {suite} suite runs on two GPUs of one host, and no worker of this deployment takes "
            f"such jobs. The check run is neutral so that it does not block the pull request. Start a worker with "
            f"two GPUs (`COMPILE_CI_GPUS=0,1 compile-ci worker --queues {MULTI_GPU_QUEUE}`) and re-run, or run "
            f"{suite} on cpu only.")


def plan_jobs(config: RepoConfig, served: tuple[str, ...], max_minutes: int, has_file: bool = True
              ) -> list[PlannedJob]:
    """`served`: the queues some worker consumes (served_queues). Without a config file, a multi-GPU job no worker
    takes is left out rather than shown as skipped, as devices without a worker are (default_devices)."""
    minutes = min(config.timeout_minutes, max_minutes)
    jobs = []
    for suite in config.suites:
        for device in DEVICES:
            if device not in config.devices:
                continue
            queue = job_queue(suite, device)
            if queue in served:
                skip = None
            elif device not in served:
                skip = skip_reason(device, served)
            elif not has_file:
                continue
            else:
                skip = multi_gpu_skip_reason(suite)
            jobs.append(PlannedJob(suite, device, minutes * 60, skip))
    return jobs
