"""DockerRunner: the job in a hardened, throwaway container. The docker_* modules are the only importers of the
docker SDK: this one runs a job; docker_container.py describes its container, docker_output.py reads what it left,
docker_engine.py makes the plain engine calls and sweeps, docker_prestart.py starts containers before their jobs."""

from __future__ import annotations

import logging
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors
import docker.types
import requests

from runners import docker_prestart as prestart
from runners import header_seed
from runners import prestart_rules as rules
from runners.compile_cache import CacheScopeError, JobCache, open_job_cache, process_alive, slug
from runners.cpu_shares import CpuShares
from runners.docker_container import (
    CACHE_MOUNT,
    DEADLINE_LABEL,
    DEADLINE_SLACK_S,
    DEPLOYMENT_LABEL,
    LABEL,
    RUNNER_UID,
    WRAPPER_FAILED,
    container_config,
    container_name,
    output_volume_name,
)
from runners.docker_engine import (
    ENGINE_ERRORS,
    container_exists,
    engine_answers,
    remove_container,
    remove_volume,
    sweep,
    wait,
)
from runners.docker_output import OutputVolume, first_line, image_files, pump_logs, ticking
from runners.job_log import LogSink
from runners.layer_cap import LayerWatch
from runners.protocol import RunResult, RunSpec, ShouldCancel

log = logging.getLogger(__name__)

DEFAULT_IMAGES = {"cpu": "compile-ci/runner-cpu:latest", "cuda": "compile-ci/runner-cuda:latest"}
UNTRUSTED_LAYERS = ("overlay", "copy")
STOP_GRACE_S = 10


@dataclass(frozen=True)
class _JobCache:
    """A job's compile cache as the engine mounts it."""

    mount: docker.types.Mount
    cache: JobCache
    volume: str | None = None  # an untrusted job's overlay, mounted by the engine


class DockerRunner:
    """Runs a RunSpec in a container: no network, no capabilities, non-root, read-only root, limits from the job."""

    name = "docker"
    python = "python"  # the image's interpreter (on its PATH)

    def __init__(self, images: Mapping[str, str] | None = None, client: docker.DockerClient | None = None,
                 untrusted_layer: str = "overlay", deployment: str = "default", gpus: tuple[str, ...] = (),
                 slots: int = 1, cpus: tuple[int, ...] = (), warm: bool = False) -> None:
        if untrusted_layer not in UNTRUSTED_LAYERS:
            raise ValueError(f"untrusted_layer must be one of {UNTRUSTED_LAYERS}, got {untrusted_layer!r}")
        self.images = {**DEFAULT_IMAGES, **(images or {})}
        # overlay: the engine mounts the trusted cache read-only under a per-job upper layer (no copying);
        # copy: a per-job copy of it, for engines or filesystems that cannot mount overlays.
        self.untrusted_layer = untrusted_layer
        self._client = client
        self.deployment = deployment
        self.gpus = gpus
        # COMPILE_CI_JOB_SLOTS and COMPILE_CI_CPUS: each job that runs at once in a cpuset of its own.
        self.shares = CpuShares(slots, cpus)
        self._torch_versions: dict[str, str] = {}
        self._seeds: dict[str, Path | None] = {}  # image id -> its header seed (None: the image has none)
        # COMPILE_CI_WARM_START: pull-request jobs take containers started before them (runners/docker_prestart.py).
        self.prestarts = prestart.Prestarts(self, slots) if warm else None

    @property
    def client(self) -> docker.DockerClient:
        if self._client is None:
            # "auto": the engine's own API version, so an older engine (Debian's 20.10) still answers.
            self._client = docker.DockerClient.from_env(version="auto", timeout=30)
        return self._client

    def cache_key(self, device: str) -> str:
        """Compile caches are only valid for one (image, torch version): a new torch starts a fresh cache."""
        torch = self.torch_version(device)  # "": the job will report the missing image itself
        return f"docker-{slug(self.images[device])}" + (f"-torch{torch}" if torch else "")

    def build_id(self, device: str) -> str:
        try:
            image_id = self.client.images.get(self.images[device]).id or ""
        except docker.errors.DockerException:
            return ""
        return f"{image_id}-torch{self.torch_version(device)}" if image_id else ""

    def torch_version(self, device: str) -> str:
        """The image's `org.compile-ci.torch-version` label ("unknown" without one; "" without the image)."""
        image = self.images[device]
        if image not in self._torch_versions:
            try:
                labels = self.client.images.get(image).labels or {}
                self._torch_versions[image] = labels.get("org.compile-ci.torch-version", "unknown")
            except docker.errors.DockerException:
                return ""
        return self._torch_versions[image]

    def run(self, spec: RunSpec, should_cancel: ShouldCancel | None = None) -> RunResult:
        with self.shares.lease() as part:
            return self._run(spec, should_cancel, part)

    def _run(self, spec: RunSpec, should_cancel: ShouldCancel | None, part: tuple[int, ...]) -> RunResult:
        start = time.monotonic()
        spec.output_dir.mkdir(parents=True, exist_ok=True)
        name = container_name(spec.job_id)
        cache: _JobCache | None = None
        entry: prestart.Prestarted | None = None
        output: OutputVolume | None = None
        clean = False  # whether the job ended by itself: only then are its trusted cache writes kept
        try:
            self._remove(name)  # a stale container from a crashed attempt holds the name
            config = self._config(spec, None, None, part)
            claimed = self._prestarted(spec, part, name, config)
            if claimed is not None:  # created, started and through its imports before this job came
                entry, watch = claimed
                output, cache, container = entry.output, entry.cache, entry.container
            else:
                output = OutputVolume(self.client, spec, self.images[spec.device], self.deployment,
                                      output_volume_name(spec.job_id), self._labels(spec))
                cache = self._prepare_cache(spec)
                container = self.client.containers.create(**self._config(
                    spec, cache.mount if cache is not None else None, output.open(), part))
                # The layer's baseline before the job can write (taken after, its first writes escaped the cap).
                watch = LayerWatch(cache.cache if cache is not None else None)
                container.start()
            upcoming = rules.for_pull_requests(spec) if self.prestarts is not None else None
            if self.prestarts is not None and upcoming is not None and not rules.eligible(upcoming, self.python):
                self.prestarts.make_later(upcoming, part, self._config)  # for the next pull-request job like this one
            with LogSink(spec.log_path, spec.log_mb << 20) as log:
                pump = threading.Thread(target=pump_logs, args=(container, log, spec.grants), daemon=True)
                pump.start()
                outcome = wait(container, spec.timeout_s, ticking(output, watch, should_cancel))
                if outcome.kind != "exited":
                    container.kill()
                container.wait(timeout=STOP_GRACE_S)
                pump.join(timeout=STOP_GRACE_S)
            # Read before removal: once removed, whether the kernel OOM-killed the job is gone with it.
            container.reload()
            state = container.attrs["State"]
            exit_code = int(state["ExitCode"])
            duration = time.monotonic() - start
            # 124/137: its own deadline (coreutils' timeout) or a SIGKILL ended it, maybe mid-write.
            clean = outcome.kind == "exited" and not state.get("OOMKilled") and exit_code not in (124, 137)
            if exit_code in (126, 127) and first_line(spec.log_path).startswith(WRAPPER_FAILED):
                return self._infra(start, f"the job's command cannot start: {first_line(spec.log_path)}")
            report = output.collect()
            return RunResult(exit_code, duration, timed_out=outcome.kind == "timeout",
                             cancelled=outcome.kind == "cancelled" and not watch.over, cache_over_cap=watch.over,
                             oom=bool(state.get("OOMKilled")) and outcome.kind == "exited", output=report)
        except docker.errors.ImageNotFound as exc:
            return self._infra(start, f"runner image missing: {exc.explanation or exc}")
        except docker.errors.APIError as exc:
            return self._infra(start, f"the Docker engine refused the job container: {exc.explanation or exc}")
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            return self._infra(start, f"the Docker engine is unreachable: {exc}")
        except (CacheScopeError, subprocess.CalledProcessError) as exc:
            return self._infra(start, f"the job's compile cache could not be set up: {exc}")
        except OSError as exc:
            return self._infra(start, f"the worker could not set up or save the job's files: {exc}")
        finally:
            self._remove(name)
            if output is not None:
                output.close()
            if cache is not None:
                self._release_cache(cache, clean)
            if entry is not None:
                shutil.rmtree(entry.staging, ignore_errors=True)

    def _config(self, spec: RunSpec, cache: docker.types.Mount | None, output: docker.types.Mount | None,
                part: tuple[int, ...]) -> dict[str, Any]:
        return container_config(spec, self.images[spec.device], cache, self.deployment, gpus=self.gpus,
                                output=output, cpus=part)

    def _prestarted(self, spec: RunSpec, part: tuple[int, ...], name: str,
                    config: dict[str, Any]) -> tuple[prestart.Prestarted, LayerWatch] | None:
        """A pre-started container this job may take, given the job (its checkout linked in, renamed for it, its
        command sent) with its cache layer's watch; or None: the job starts its own."""
        why = rules.eligible(spec, self.python) if self.prestarts is not None else "no warm start"
        if why:
            log.debug("job %s: starts its own container: %s", spec.job_id, why)
            return None
        env = {k: v for k, v in config["environment"].items() if rules.per_job(k)}
        line = rules.go_line(list(config["command"][3:]), env)
        entry = self.prestarts.take(rules.description_key(config, spec), spec.job_id) if line is not None else None
        if entry is None or line is None:
            return None
        try:
            entry.container.reload()
            if entry.container.status != "running":
                raise RuntimeError(f"it is {entry.container.status}")
            entry.fill(spec.checkout_dir)
            entry.container.rename(name)
            entry.output.spec = spec
            # The layer's baseline before the job can write (as for a container of its own, below).
            watch = LayerWatch(entry.cache.cache if entry.cache is not None else None)
            entry.go(line, part)
        except (*ENGINE_ERRORS, RuntimeError, OSError) as exc:
            log.warning("job %s: a pre-started container could not be used (%s); it starts its own", spec.job_id, exc)
            self.prestarts.discard(entry)
            return None
        return entry, watch

    def _labels(self, spec: RunSpec) -> dict[str, str]:
        deadline = int(time.time()) + int(spec.timeout_s) + DEADLINE_SLACK_S + 10
        return {LABEL: spec.job_id, DEPLOYMENT_LABEL: self.deployment, DEADLINE_LABEL: str(deadline)}

    def _prepare_cache(self, spec: RunSpec, job_id: str = "") -> _JobCache | None:
        if spec.cache is None:
            return None
        job_id = job_id or spec.job_id
        cache = open_job_cache(spec.cache, self.cache_key(spec.device), job_id, self.untrusted_layer, RUNNER_UID,
                               self._writing, self._seed(spec))
        if cache.directory is not None:
            return _JobCache(docker.types.Mount(CACHE_MOUNT, str(cache.directory), type="bind"), cache)
        volume = "compile-ci-cache-" + slug(job_id)
        try:
            self._remove_volume(volume)
            self.client.volumes.create(name=volume, driver="local",
                                       labels={LABEL: job_id, DEPLOYMENT_LABEL: self.deployment},
                                       driver_opts={"type": "overlay", "device": "overlay", "o": cache.overlay_options})
        except BaseException:
            cache.close()  # the layer goes with the failed setup
            raise
        return _JobCache(docker.types.Mount(CACHE_MOUNT, volume, type="volume", no_copy=True), cache, volume)

    def _seed(self, spec: RunSpec) -> Path | None:
        """The image's precompiled header, archived out of it once per image (runners/header_seed.py)."""
        assert spec.cache is not None
        image, key = self.images[spec.device], self.cache_key(spec.device)
        build = self.client.images.get(image).id or image
        read = lambda: image_files(self.client, image, f"{header_seed.IMAGE_SEED}/{header_seed.HEADER_DIR}",  # noqa: E731
                                   {DEPLOYMENT_LABEL: self.deployment})
        return header_seed.remembered(self._seeds, build, lambda: header_seed.ensure(
            header_seed.seed_dir(spec.cache.root, key, build), header_seed.from_archive(read), RUNNER_UID))

    def _release_cache(self, job_cache: _JobCache, clean: bool) -> None:
        if job_cache.volume is not None:
            self._remove_volume(job_cache.volume)
        job_cache.cache.close(clean)

    def _writing(self, job: str, holder: str) -> bool:
        """Whether a trusted job marked writing may still write: its container runs, or its worker lives (a job whose
        container is not created yet is starting; one that ends closes its own mark)."""
        return container_exists(self.client, container_name(job)) or process_alive(holder)

    def _remove_volume(self, volume: str) -> None:
        remove_volume(self.client, volume)

    def _infra(self, start: float, message: str) -> RunResult:
        return RunResult(None, time.monotonic() - start, infra_error=message)

    def _remove(self, name: str) -> None:
        remove_container(self.client, name)

    def engine_answers(self) -> bool:
        return engine_answers()

    def close(self) -> None:
        if self.prestarts is not None:
            self.prestarts.close()
        if self._client is not None:
            self._client.close()
            self._client = None

    def sweep_leftovers_quietly(self, is_orphan: Callable[[str], bool] | None = None) -> None:
        """At worker start: what a previous worker of this deployment left (a crash, a SIGKILL) goes now."""
        try:
            self.sweep_leftovers(is_orphan)
        except ENGINE_ERRORS:
            pass  # an engine that is down now is reported by the first job, as an infrastructure error

    def sweep_leftovers(self, is_orphan: Callable[[str], bool] | None = None) -> int:
        """runners/docker_engine.py's sweep of this deployment's leftovers."""
        return sweep(self.client, self.deployment, is_orphan)
