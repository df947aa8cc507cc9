"""A run's torch matrix: each planned (suite, device) once per torch version the repository asks for, routed to the
workers of that version; and, on a worker, which runner holds its version and whether it really does.

A worker serves one version (COMPILE_CI_WORKER_TORCH): its DockerRunner's images are that version's, its LocalRunner's
interpreter (COMPILE_CI_RUNNER_PYTHON) has that version installed. Every job checks this before it runs, so a
misconfigured worker is an infrastructure error that names both versions, never results reported under the wrong one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from runners.protocol import Runner
from service.config import Settings
from service.planning.plan import MULTI_GPU_QUEUE, PlannedJob
from service.repo_config import CONFIG_FILE, RepoConfig
from service.store import Job, Run, job_id_for
from service.store.rows import CANARY_TRIGGER
from service.torch_versions import TorchVersion, advisory_of, find, job_torch, queue_for, same_release


class RunnerVersionMismatch(RuntimeError):
    """This worker's runner holds another torch than the job's (the job is then an infrastructure error)."""


def names(settings: Settings) -> tuple[str, ...]:
    return tuple(v.name for v in settings.torch_versions)


def versions_of(run: Run, config: RepoConfig, settings: Settings) -> tuple[TorchVersion, ...]:
    """What a run's jobs run on: the canary's advisory version; else `[suites] torch` (validated against the
    deployment at planning), else the deployment's default."""
    if run.trigger == CANARY_TRIGGER:
        advisory = advisory_of(settings.torch_versions)
        return (advisory,) if advisory is not None else ()
    chosen = [find(settings.torch_versions, name) for name in config.torch]
    return tuple(v for v in chosen if v is not None) or settings.torch_versions[:1]


def expand(planned: list[PlannedJob], versions: tuple[TorchVersion, ...], settings: Settings,
           live_queues: frozenset[str] | None) -> list[PlannedJob]:
    """Each planned job once per version; a version no live worker serves is settled neutral, like a device."""
    every = settings.torch_versions
    expanded = []
    for job in planned:
        for version in versions:
            torch = job_torch(every, version.name)
            skip = job.skip_reason
            if skip is None and torch and not served(job.queue, torch, live_queues, settings):
                skip = skip_reason(job.device, version.name)
            expanded.append(replace(job, torch=torch, advisory=version.advisory, skip_reason=skip))
    return expanded


def served(queue: str, torch: str, live_queues: frozenset[str] | None, settings: Settings) -> bool:
    """Whether a live worker consumes the (queue, torch) queue (`queue`: a device's, or cuda2); yes when nobody
    could be asked or no job queue has a worker at all (a deployment starting up: its jobs wait in their queues)."""
    if live_queues is None:
        return True
    queues = (*settings.devices, *((MULTI_GPU_QUEUE,) if "cuda" in settings.devices else ()))
    job_queues = {queue_for(q, job_torch(settings.torch_versions, v.name))
                  for q in queues for v in settings.torch_versions}
    return queue_for(queue, torch) in live_queues or not (job_queues & live_queues)


def skip_reason(device: str, version: str) -> str:
    return (f"Nothing ran: this repository's {CONFIG_FILE} asks for torch {version} ([suites] torch), and this "
            f"deployment lists it, but no worker serves {device} jobs on torch {version} now. The check run is "
            f"neutral so that it does not block the pull request. Start one (`compile-ci worker --queues {device} "
            f"--torch {version}`) and re-run.")


def on_version(job: Job, planned: PlannedJob) -> Job:
    """A new job row (not stored yet) on the planned version: the default version's id and name stay as they were."""
    if planned.torch:
        job.id = job_id_for(job.run_id, job.suite, job.device, planned.torch)
    job.torch, job.torch_advisory = planned.torch, int(planned.advisory)
    return job


def runner_images(settings: Settings) -> Mapping[str, str]:
    """The DockerRunner's image per device on this worker's version: the configured images for the default, else
    the same repositories tagged `torch<version>` (what `compile-ci images build cpu --torch 2.14.x` makes)."""
    images = {"cpu": settings.runner_image_cpu, "cuda": settings.runner_image_cuda}
    torch = job_torch(settings.torch_versions, settings.worker_torch or settings.torch_versions[0].name)
    return {device: version_tag(image, torch) for device, image in images.items()} if torch else images


def version_tag(image: str, torch: str) -> str:
    """`compile-ci/runner-cpu:latest` -> `compile-ci/runner-cpu:torch2.14` (a registry's port is not a tag)."""
    name = image.rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image
    return f"{name}:torch{torch}"


def check_runner(runner: Runner, job: Job, settings: Settings) -> None:
    """Refuse to run a job on a runner of another torch release than the job's (raised: an infrastructure error)."""
    wanted = job.torch or settings.torch_versions[0].name
    installed = runner.torch_version(job.device)
    if installed in ("", "unknown") or same_release(installed, wanted):
        return  # unknown: the runner reports its own problem (a missing image) when it runs the job
    raise RunnerVersionMismatch(
        f"this worker's {runner.name} runner has torch {installed}, but the job is for torch {wanted}: "
        f"COMPILE_CI_WORKER_TORCH and the runner's image or COMPILE_CI_RUNNER_PYTHON disagree on this worker")
