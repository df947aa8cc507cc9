"""LocalRunner: the job as a subprocess in its own process group (GPU hosts without Docker, dev)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from runners import header_seed, warm_start
from runners.compile_cache import JobCache, open_job_cache, process_alive, slug
from runners.cpu_shares import CpuShares, job_env, pin
from runners.gpus import gpu_job_env, visible_devices
from runners.grants import Sink, tapped
from runners.job_log import LogSink
from runners.layer_cap import LayerWatch
from runners.outbox import (
    PROGRESS_EVERY_S,
    PROGRESS_FILE,
    PROGRESS_LIMIT,
    OutputReport,
    collect_tree,
    publish_progress,
)
from runners.protocol import RunResult, RunSpec, ShouldCancel, map_paths
from runners.toolchain import host_env, source_keys_env, vec_isa_env
from runners.untrusted_files import read_bounded, usage

# The worker's environment holds the webhook secret and the App's private key; the job gets none
# of it, only what a test process needs to find its toolchain and GPU.
KILL_GRACE_S = 5.0
PUMP_DRAIN_S = 60.0
_seed_lock = threading.Lock()


def _after_fork() -> None:
    """As runners/toolchain.py: a child forked mid-preparation takes a new lock (the seed's own file lock still keeps
    one builder at a time across processes)."""
    global _seed_lock
    _seed_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork)
_USER = warm_start.JOB_USER  # the job's user name as inductor spells it in its default cache directory


def private_dir(output_dir: Path) -> Path:
    """Where the job really writes (out/) and keeps its HOME and TMPDIR (tmp/): beside the results directory, never
    inside it; copied out as untrusted data, then deleted."""
    return output_dir.with_name(output_dir.name + ".job")


class LocalRunner:
    """Trusted hosts only: the job runs as the worker's user, so it can read whatever that user can, every
    repository's cache included. What it does guarantee: an untrusted job works on a private copy of its
    repository's trusted cache (deleted after it), so nothing it writes is ever imported by another job; its
    output is copied out like a container's (regular files, no links followed, bounded), and its quota is checked
    every few seconds (a container's is enforced by the kernel)."""

    name = "local"

    def __init__(self, python: str = "", gpus: tuple[str, ...] = (), warm: bool = False, slots: int = 1,
                 cpus: tuple[int, ...] = ()) -> None:
        self.python = python or sys.executable
        self.warm = warm  # COMPILE_CI_WARM_START: jobs forked from the host's warm interpreter (runners/warm_start.py)
        self.gpus = gpus  # COMPILE_CI_GPUS: what a cuda job may see (empty: every GPU of the host)
        # COMPILE_CI_JOB_SLOTS and COMPILE_CI_CPUS: each job that runs at once on its own part of the worker's CPUs.
        self.shares = CpuShares(slots, cpus)
        self._torch: str | None = None
        self._seeds: dict[str, Path | None] = {}
        self._interpreter = ""  # the interpreter `python` runs (a wrapper script's too), for the header seed's key

    def cache_key(self, device: str) -> str:
        # Every venv's interpreter is called `python`: its torch tells two venvs' caches apart.
        return slug(f"local-{Path(self.python).name}-torch{self.torch_version(device) or 'unknown'}")

    def build_id(self, device: str) -> str:
        torch = self.torch_version(device)
        return f"local-{os.path.realpath(shutil.which(self.python) or self.python)}-torch{torch}" if torch else ""

    def torch_version(self, device: str) -> str:
        """Read from the interpreter's installed metadata once (milliseconds: torch itself is not imported)."""
        if self._torch is None:
            try:
                probe = ("import importlib.metadata as m, os, sys; print(m.version('torch')); "
                         "print(os.path.realpath(sys.executable))")
                done = subprocess.run([self.python, "-c", probe], capture_output=True, text=True, timeout=60,
                                      env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
                lines = done.stdout.split() if done.returncode == 0 else []
                self._torch, self._interpreter = (lines[0], lines[-1]) if len(lines) == 2 else ("", "")
            except (OSError, subprocess.TimeoutExpired):
                self._torch = ""
        return self._torch

    def prepare(self, cache_root: Path, devices: Sequence[str] = ()) -> None:
        """What every job of this host needs and no job writes, made when the worker starts rather than by its first
        job: the CPU-ISA verdict, inductor's source keys and the precompiled header (on a 16-core GPU host its first
        job waited about 50 s for them). A job that starts meanwhile waits for the same, under the same locks. With
        warm starts, the warm interpreter of a built-in suite's job on each of `devices` (the worker's queues) and
        each slot's size is started first, so the worker's first jobs fork from it rather than start fresh."""
        if self.warm:
            for device in dict.fromkeys(devices):
                for part in dict.fromkeys(self.shares.parts):
                    warm_start.prestart(self.python, self._job_env(part, device, {}))
        self._seed(cache_root, "cpu", self._host_env())

    def _host_env(self) -> dict[str, str]:
        """A job's environment before its own variables (and its HOME and TMPDIR): what it may pass through, the
        linker, and the verdicts checked once per worker process."""
        env = host_env()
        env.update(vec_isa_env(self.python, env))
        env.update(source_keys_env(self.python, env))
        return env

    def _job_env(self, part: Sequence[int], device: str, own: Mapping[str, str]) -> dict[str, str]:
        """A job's environment on CPUs `part`: the host's, then the job's `own` (its directories, compile-ci's
        settings), then what no job on `device` may turn off, and the GPUs it may see."""
        env = self._host_env()
        env.update({"PYTHONUNBUFFERED": "1", **job_env(part), **own})
        env.update(gpu_job_env(device))
        visible = visible_devices(device, self.gpus)
        if visible is not None:
            env["CUDA_VISIBLE_DEVICES"] = visible
        return env

    def _seed(self, cache_root: Path, device: str, env: dict[str, str]) -> Path | None:
        """The precompiled header, built once per host and interpreter (a wrapper script's too: keyed by the
        interpreter it runs) in a job's environment before its own variables, where no job runs
        (runners/header_seed.py); a job that comes before the worker's `prepare` is done waits for it."""
        torch = self.torch_version(device)
        if not torch:
            return None  # the job says torch is missing itself
        build = f"{self._interpreter}-torch{torch}"
        with _seed_lock:
            return header_seed.remembered(self._seeds, build, lambda: header_seed.ensure(
                header_seed.seed_dir(cache_root, self.cache_key(device), build),
                header_seed.from_interpreter(self.python, env)))

    def run(self, spec: RunSpec, should_cancel: ShouldCancel | None = None) -> RunResult:
        with self.shares.lease() as part:
            return self._run(spec, should_cancel, part)

    def _run(self, spec: RunSpec, should_cancel: ShouldCancel | None, part: tuple[int, ...]) -> RunResult:
        spec.output_dir.mkdir(parents=True, exist_ok=True)
        private = private_dir(spec.output_dir)
        shutil.rmtree(private, ignore_errors=True)
        job_out, scratch = private / "out", private / "tmp"
        job_out.mkdir(parents=True)
        scratch.mkdir()
        paths = [(str(spec.output_dir), str(job_out))]
        seed = self._seed(spec.cache.root, spec.device, self._host_env()) if spec.cache is not None else None
        env = self._job_env(part, spec.device, {"HOME": str(scratch), "TMPDIR": str(scratch),
                                                **{key: map_paths(value, paths) for key, value in spec.env.items()}})
        start = time.monotonic()
        cache: JobCache | None = None
        outcome = "not started"
        try:
            if spec.cache is not None:
                # "copy": an untrusted job never gets the trusted directory itself, only a throwaway copy of it.
                cache = open_job_cache(spec.cache, self.cache_key(spec.device), spec.job_id, "copy", None,
                                       lambda _job, holder: process_alive(holder), seed)
                assert cache.directory is not None
                env.update({"TORCHINDUCTOR_CACHE_DIR": str(cache.directory / "inductor"),
                            "TRITON_CACHE_DIR": str(cache.directory / "triton"), "USER": _USER})
                # Inductor keeps its precompiled headers (and its newer caches) in $TMPDIR/torchinductor_<user>
                # whatever TORCHINDUCTOR_CACHE_DIR says; the job's TMPDIR is thrown away after it, so without this
                # link every job rebuilt cpp_prefix.h's header (about 20 s of its first compile), as the
                # DockerRunner's mount at /tmp/torchinductor_runner avoids (runners/docker_container.py).
                (scratch / f"torchinductor_{_USER}").symlink_to(cache.directory, target_is_directory=True)
            watch = LayerWatch(cache)  # its baseline before the job can write: a flood at its start counts too
            with LogSink(spec.log_path, spec.log_mb << 20) as log:
                command = [map_paths(arg, paths) for arg in spec.command]
                try:
                    proc: subprocess.Popen[bytes] | warm_start.WarmJob = (self.warm and warm_start.start(
                        self.python, command, scratch, env)) or subprocess.Popen(
                        command, cwd=scratch, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL, start_new_session=True)
                except OSError as exc:
                    return RunResult(None, time.monotonic() - start, infra_error=f"cannot start job: {exc}")
                pin(proc.pid, part)  # and the job pins itself before it imports torch (suites/cpu_share.py)
                if isinstance(proc, warm_start.WarmJob):
                    made = "torch, pytest, dynamo and inductor" if proc.compiler else "torch and pytest"
                    log.write(f"[compile-ci] the job's process {proc.pid} was forked from this host's warm "
                              f"interpreter ({made} imported once)\n".encode())
                assert proc.stdout is not None
                pump = threading.Thread(target=_pump, args=(proc.stdout, tapped(log, spec.grants)), daemon=True)
                pump.start()
                try:
                    outcome = _wait(proc, spec, should_cancel, job_out, watch)
                finally:
                    _kill_group(proc)
                    # The job is gone: what it printed is in the pipe until EOF. A loaded host may not schedule
                    # this thread for seconds, so wait long enough (a log cut short loses pytest's summary).
                    pump.join(timeout=PUMP_DRAIN_S)
                    proc.stdout.close()
        except (OSError, subprocess.CalledProcessError, ValueError) as exc:
            return RunResult(None, time.monotonic() - start, infra_error=f"the job's compile cache failed: {exc}")
        finally:
            if cache is not None:
                # Only a job that exited by itself keeps what it wrote to the trusted cache.
                cache.close(clean=outcome == "exited")
        duration = time.monotonic() - start
        shutil.rmtree(scratch, ignore_errors=True)
        try:
            report = collect_tree(job_out, spec.output_dir, spec.output_limits)
        except OSError as exc:
            return RunResult(None, duration, infra_error=f"the worker could not save the job's files: {exc}")
        finally:
            shutil.rmtree(private, ignore_errors=True)
        if isinstance(proc, warm_start.WarmJob) and proc.lost and outcome == "exited":
            return RunResult(None, duration, infra_error="the warm interpreter that started the job ended under it",
                             output=report)
        if outcome == "over quota":
            report = OutputReport(report.files, report.bytes, report.problems, report.problem_count, True)
        return RunResult(proc.returncode, duration, timed_out=outcome == "timeout",
                         cancelled=outcome == "cancelled", cache_over_cap=outcome == "cache over cap", output=report)


def _pump(stream: IO[bytes], log: Sink) -> None:
    while chunk := stream.read1(64 * 1024):  # type: ignore[attr-defined]
        log.write(chunk)


def _wait(proc: subprocess.Popen[bytes] | warm_start.WarmJob, spec: RunSpec, should_cancel: ShouldCancel | None,
          job_out: Path, watch: LayerWatch) -> str:
    deadline = time.monotonic() + spec.timeout_s
    measured = time.monotonic()
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return "timeout"
        try:
            proc.wait(timeout=min(1.0, remaining))
            return "exited"
        except subprocess.TimeoutExpired:
            if watch.check():
                return "cache over cap"
            if should_cancel is not None and should_cancel():
                return "cancelled"
        if time.monotonic() - measured >= PROGRESS_EVERY_S:
            measured = time.monotonic()
            quota = spec.output_limits.total_bytes
            if usage(job_out, quota) > quota:
                return "over quota"
            _copy_progress(job_out, spec.output_dir)


def _copy_progress(job_out: Path, dest: Path) -> None:
    try:
        publish_progress(dest, read_bounded(job_out, PROGRESS_FILE, PROGRESS_LIMIT))
    except OSError:
        pass  # not written yet, or not a plain small file: no progress shown


def _kill_group(proc: subprocess.Popen[bytes] | warm_start.WarmJob) -> None:
    """Stop the job and everything it spawned (compile workers, test subprocesses)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    # SIGKILL is delivered asynchronously; return only once nothing of the job still runs (a GPU job's
    # memory is freed only then, and the next job may need it).
    deadline = time.monotonic() + KILL_GRACE_S
    while _group_members(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.02)


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group, read from /proc."""
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(entry.name))
    return members

