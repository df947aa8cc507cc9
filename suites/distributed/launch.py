"""Starting a run's two ranks on this host, one subprocess each, and collecting what each of them reported.

The test process holds the TCP store the ranks rendezvous at, on a loopback port the kernel picks (port 0), so no
port is guessed and two jobs on one host never collide; a job container has no network, but loopback works. Each
rank writes its results and its log under ``workdir``; a rank still running long after its peer exited (waiting in a
collective that will never come) or past the run's deadline is killed with its whole process group.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

import suites
from suites.distributed.steps import WORLD_SIZE

# Kept equal to runners.gpus.GPU_JOB_ENV (suites never import runners; tests/suites checks they agree).
GPU_JOB_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}

TIMEOUT_ENV = "COMPILE_CI_DISTRIBUTED_TIMEOUT_S"
RUN_TIMEOUT_S = 900  # one model under every wrapper asked for, compiled cold on a 2-CPU job
PEER_GRACE_S = 60  # how long a rank may run on after its peer exited: compiling or saving, not more
LOG_TAIL_LINES = 12


@dataclass
class RankReport:
    rank: int
    exit_code: int | None
    results: dict[str, dict[str, Any]] = field(default_factory=dict)  # wrapper -> what the rank saved for it
    stopped: str = ""  # why the launcher killed it, if it did
    log_tail: str = ""

    def describe(self) -> str:
        """How the rank ended, for a failure message."""
        if self.stopped:
            how = self.stopped
        elif self.exit_code == 0:
            how = "exited normally"
        else:
            how = f"exited with code {self.exit_code}"
        return how + (f"; its last lines:\n{self.log_tail}" if self.log_tail else "")


def backend_for(device: str) -> str:
    return "nccl" if device == "cuda" else "gloo"


def rank_environment(device: str) -> dict[str, str]:
    """The job's environment plus what two ranks on one host need; a variable the job already sets wins."""
    env = dict(os.environ)
    suites_parent = str(Path(suites.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [suites_parent, env.get("PYTHONPATH")]))
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    defaults = {
        # As torchrun does: each rank one intra-op thread, so two ranks do not fight over the job's CPUs.
        "OMP_NUM_THREADS": "1",
        # Inductor starts a pool of min(32, CPUs) compile workers per process: halve it per rank, capped, so two
        # ranks stay within the job's process limit.
        "TORCHINDUCTOR_COMPILE_THREADS": str(max(1, min(8, cpus // WORLD_SIZE))),
    }
    if device == "cuda":
        # NVLink multicast stays off (runners/gpus.py sets the same for every cuda job; here again for a suite run
        # outside a runner): on a shared GPU host a program using it can put every GPU out of service.
        defaults.update(GPU_JOB_ENV)
        defaults["NCCL_SOCKET_IFNAME"] = "lo"  # both ranks are on this host; a container has only loopback
    else:
        defaults["GLOO_SOCKET_IFNAME"] = "lo"  # a container without network has only loopback
    for key, value in defaults.items():
        env.setdefault(key, value)
    return env


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as log:
            log.seek(max(0, path.stat().st_size - 8192))
            lines = log.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-LOG_TAIL_LINES:])


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run_timeout_s() -> int:
    """How long the two ranks of one model may take, all wrappers together (TIMEOUT_ENV, default RUN_TIMEOUT_S)."""
    value = os.environ.get(TIMEOUT_ENV, "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else RUN_TIMEOUT_S


def _wait(procs: list[subprocess.Popen[bytes]], limit_s: int) -> dict[int, str]:
    """Wait for every rank; kill those past the deadline or long after a peer exited. Returns rank -> why killed."""
    stopped: dict[int, str] = {}
    deadline = time.monotonic() + limit_s
    first_exit: float | None = None
    while any(proc.returncode is None for proc in procs):
        for rank, proc in enumerate(procs):
            if proc.returncode is not None:
                continue
            try:
                proc.wait(timeout=0.5)
                first_exit = first_exit or time.monotonic()
            except subprocess.TimeoutExpired:
                now = time.monotonic()
                if now > deadline:
                    stopped[rank] = f"was killed at the run's {limit_s} s limit ({TIMEOUT_ENV})"
                elif first_exit is not None and now - first_exit > PEER_GRACE_S:
                    stopped[rank] = f"was still running {PEER_GRACE_S} s after its peer exited, and was killed"
                else:
                    continue
                _kill(proc)
    return stopped


def run_ranks(source: str, name: str, wrappers: list[str], device: str, workdir: Path) -> list[RankReport]:
    """Train model ``name`` (``source``: corpus or declared) under each wrapper on two ranks; their reports."""
    workdir.mkdir(parents=True, exist_ok=True)
    limit_s = run_timeout_s()
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=limit_s))
    request = {"host": "127.0.0.1", "port": store.port, "backend": backend_for(device), "device": device,
               "source": source, "name": name, "wrappers": wrappers, "out_dir": str(workdir),
               "timeout_s": limit_s}
    request_path = workdir / "request.json"
    request_path.write_text(json.dumps(request))
    env = rank_environment(device)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for rank in range(WORLD_SIZE):
            with (workdir / f"rank{rank}.log").open("wb") as log:
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "suites.distributed.rank", str(request_path), str(rank)],
                    cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True))  # its own process group: killing it ends its compile workers too
        stopped = _wait(procs, limit_s)
    finally:
        for proc in procs:
            if proc.returncode is None:
                _kill(proc)
        del store
    reports = []
    for rank, proc in enumerate(procs):
        results = {}
        for wrapper in wrappers:
            path = workdir / f"rank{rank}-{wrapper}.pt"
            if path.is_file():
                results[wrapper] = torch.load(path, weights_only=True)
        failed = proc.returncode != 0 or rank in stopped
        reports.append(RankReport(rank, proc.returncode, results, stopped.get(rank, ""),
                                  _tail(workdir / f"rank{rank}.log") if failed else ""))
    return reports
