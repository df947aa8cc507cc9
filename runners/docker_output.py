"""A Docker job's output space: a size-capped tmpfs volume that only the job writes, held mounted by a tiny holder
container so that, after the job has ended (even killed), the engine can archive what it left for the worker.

Why not a bind mount of a host directory (as before): the worker then read and wrote through whatever the job had
planted there (links to the App's key, FIFOs), and nothing capped its size. The tmpfs caps bytes and entries in the
kernel while the job runs (ENOSPC past them), the worker never opens a path the job controls (the engine's archive
is parsed as data by runners/outbox.py), and the volume goes with the job.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker.errors
import docker.types
import requests

from runners.docker_container import OUTPUT_MOUNT, RUNNER_UID, holder_config, output_volume_options
from runners.grants import GrantChannel, Sink, tapped
from runners.layer_cap import LayerWatch
from runners.outbox import PROGRESS_EVERY_S, PROGRESS_FILE, PROGRESS_LIMIT, OutputReport, collect_tar, publish_progress
from runners.protocol import RunSpec, ShouldCancel

FULL_BELOW_BYTES = 64 * 1024  # tmpfs counts pages: this little left means the job's writes were failing


class OutputVolume:
    """Create with `open()` before the job container; `collect()` after it ended; `close()` always."""

    def __init__(self, client: Any, spec: RunSpec, image: str, deployment: str, name: str, labels: dict[str, str]):
        self.client, self.spec, self.image, self.deployment = client, spec, image, deployment
        self.volume = name
        self.holder_name = name + "-holder"
        self.labels = labels
        self.holder: Any = None
        self._progress_at = 0.0

    def open(self) -> docker.types.Mount:
        self.close()  # a crashed attempt's leftovers hold the names
        self.client.volumes.create(name=self.volume, driver="local", labels=self.labels,
                                   driver_opts=output_volume_options(self.spec.output_limits))
        self.holder = self.client.containers.create(
            **holder_config(self.spec, self.image, self.volume, self.holder_name, self.labels))
        self.holder.start()
        return docker.types.Mount(OUTPUT_MOUNT, self.volume, type="volume", no_copy=True)

    def refresh_progress(self) -> None:
        """The job's progress.json, copied (as data) into the results directory every few seconds while it runs.
        Read inside the holder with a byte cap and a time limit: a link there reaches only the holder's own (public)
        image, and a FIFO only makes `head` time out."""
        if self.holder is None or time.monotonic() - self._progress_at < PROGRESS_EVERY_S:
            return
        self._progress_at = time.monotonic()
        try:
            result = self.holder.exec_run(["timeout", "2", "head", "-c", str(PROGRESS_LIMIT),
                                           f"{OUTPUT_MOUNT}/{PROGRESS_FILE}"], user=str(RUNNER_UID), stderr=False)
        except (docker.errors.DockerException, requests.exceptions.RequestException):
            return  # the next tick tries again
        if result.exit_code == 0:
            publish_progress(self.spec.output_dir, result.output)

    def collect(self) -> OutputReport:
        """What the job left, copied into the results directory; over quota when its space ran out."""
        assert self.holder is not None
        full = self._full()
        limits = self.spec.output_limits
        if self._apparent_bytes() > limits.total_bytes:
            # Only sparse files claim more than the tmpfs holds; their archive would be that long, zeros and all.
            report = OutputReport(over_quota=True)
            report.refuse(".", "files that claim more than the quota (sparse files); nothing was copied")
            return report
        stream, _stat = self.holder.get_archive(OUTPUT_MOUNT)
        report = None
        try:
            report = collect_tar(stream, self.spec.output_dir, limits, Path(OUTPUT_MOUNT).name)
        finally:
            if report is None or report.over_quota:
                self.close()  # the engine stops sending what is left of an archive we will not read
            _drain(stream)
        report.over_quota = report.over_quota or full
        return report

    def _apparent_bytes(self) -> int:
        result = self.holder.exec_run(["du", "-s", "-b", OUTPUT_MOUNT], user=str(RUNNER_UID))
        first = result.output.decode(errors="replace").split()[:1]
        return int(first[0]) if result.exit_code == 0 and first and first[0].isdigit() else 0

    def _full(self) -> bool:
        """Bytes or entries of the tmpfs used up: writes past the quota failed with ENOSPC inside the job."""
        result = self.holder.exec_run(["stat", "-f", "-c", "%a %S %d", OUTPUT_MOUNT], user=str(RUNNER_UID))
        fields = result.output.decode(errors="replace").split()
        if result.exit_code != 0 or len(fields) != 3 or not all(f.isdigit() for f in fields):
            return False
        available_blocks, block_size, free_inodes = (int(f) for f in fields)
        return available_blocks * block_size < FULL_BELOW_BYTES or free_inodes < 2

    def close(self) -> None:
        for remove in (self._remove_holder, self._remove_volume):
            try:
                remove()
            except (docker.errors.DockerException, requests.exceptions.RequestException):
                pass  # unreachable or in use: sweep_leftovers() clears it later
        self.holder = None

    def _remove_holder(self) -> None:
        try:
            self.client.containers.get(self.holder_name).remove(force=True, v=True)
        except docker.errors.NotFound:
            pass

    def _remove_volume(self) -> None:
        try:
            self.client.volumes.get(self.volume).remove(force=True)
        except docker.errors.NotFound:
            pass


def _drain(stream: Any) -> None:
    """Read the archive's tail (its end-of-archive blocks), so the connection goes back to the pool, not astray."""
    try:
        for _chunk in stream:
            pass
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError):
        pass


def ticking(output: OutputVolume, watch: LayerWatch, should_cancel: ShouldCancel | None) -> ShouldCancel:
    """The ~1/s callback of the wait: the job's progress copied out now and then, its cache layer measured, then
    the worker's own question; true stops the job."""
    def tick() -> bool:
        output.refresh_progress()
        return watch.check() or should_cancel is not None and should_cancel()
    return tick


def image_files(client: Any, image: str, path: str, labels: dict[str, str]) -> Iterator[bytes]:
    """A tar stream of `path` inside `image`, archived by the engine from a container created (never started) for
    it: how the worker takes the image's header seed (runners/header_seed.py)."""
    holder = client.containers.create(image, command=["true"], network_disabled=True, labels=labels)
    try:
        stream, _stat = holder.get_archive(path)
        yield from stream
    finally:
        holder.remove(force=True)


def pump_logs(container: Any, log: Sink, grants: GrantChannel | None = None) -> None:
    """What the job prints into its log, and its requests for tests answered on the way (runners/grants.py)."""
    log = tapped(log, grants)
    stream = None
    try:
        stream = container.logs(stream=True, follow=True, stdout=True, stderr=True)
        for chunk in stream:
            log.write(chunk)
    except (docker.errors.DockerException, requests.exceptions.RequestException):
        pass  # the container went away mid-stream (killed and removed): the log ends there
    finally:
        if stream is not None:
            stream.close()


def first_line(path: Path) -> str:
    """The job's own first line (after the worker's `$ command` header)."""
    try:
        with open(path, "rb") as log:
            lines = log.read(4096).decode(errors="replace").splitlines()
    except OSError:
        return ""
    own = [line for line in lines if not line.startswith("$ ")]
    return own[0] if own else ""
