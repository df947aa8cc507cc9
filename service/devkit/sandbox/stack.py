"""The service's processes on one machine: Redis, the web app (gunicorn), Celery workers, the emulator."""

from __future__ import annotations

import contextlib
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from service.config import Settings
from service.devkit.github_emulator import GitHubEmulator
from service.store import Store
from service.web.front import front_command
from service.web.serving import DEFAULT_THREADS, gunicorn_command

APP_ID = 424242
INSTALLATION_ID = 4242
# The signals that end a sandbox: each unwinds `with Stack(...)`, whose stop() ends every process it started
# (they run in sessions of their own, so nothing else would). SIGINT already raises KeyboardInterrupt.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _stop_by_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


_PORTS = random.SystemRandom()  # not the module's generator: a test that seeds it must not align our choices


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A loopback port free now and below the kernel's ephemeral range, so that no outgoing connection (Redis
    clients, docker, pip) can be given it between this call and the server's bind; port 0's answer could be."""
    high = min(_ephemeral_low(), 65536)
    for _ in range(200 if high - 1024 >= 1000 else 0):  # a host whose ephemeral range is (nearly) all: port 0's
        port = _PORTS.randrange(max(1024, high - 12000), high)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with code {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"{what} did not listen on port {port} within {timeout_s:.0f} s")


def app_keypair() -> tuple[str, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return private, public


class Stack:
    """Starts what the service needs under `root`; `stop()` ends all of it, in reverse order."""

    def __init__(self, root: Path, *, devices: str = "cpu", web_workers: int = 2, workers: bool = True,
                 web_threads: int = DEFAULT_THREADS, cuda_workers: int = 1, database_url: str = "",
                 front: bool = False, cpu_slots: int = 1) -> None:
        self.root = root
        # Jobs the cpu worker runs at once; with more than one, a job runs as shards across them.
        self.cpu_slots = cpu_slots
        # nginx in front of gunicorn, as deployed (service/web/front.py); web_url is then nginx's.
        self.front = front
        self._front_dir: Path | None = None
        # Empty: an SQLite file under root/data (the default deployment's); else PostgreSQL, say.
        self.database_url = database_url or f"sqlite:///{root / 'data' / 'compile-ci.sqlite3'}"
        self.web_threads = web_threads
        self.with_workers = workers
        self.devices = devices
        # With "cuda" in devices: this many cuda workers, each pinned to one GPU (COMPILE_CI_GPUS) when > 1.
        self.cuda_workers = cuda_workers
        self.web_workers = web_workers
        self.webhook_secret = secrets.token_hex(20)
        self.private_key, public_key = app_keypair()
        self.emulator = GitHubEmulator(app_id=APP_ID, public_key_pem=public_key)
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.commands: dict[str, list[str]] = {}
        self.redis_url = ""
        self.web_url = ""
        self._previous_handlers: dict[int, Any] = {}

    def env(self) -> dict[str, str]:
        key_file = self.root / "app-key.pem"
        if not key_file.exists():
            key_file.write_text(self.private_key)
            key_file.chmod(0o600)
        return {
            "COMPILE_CI_WEBHOOK_SECRET": self.webhook_secret,
            "COMPILE_CI_GITHUB_APP_ID": str(APP_ID),
            "COMPILE_CI_GITHUB_PRIVATE_KEY_FILE": str(key_file),
            "COMPILE_CI_GITHUB_API_URL": self.emulator.url,
            "COMPILE_CI_GITHUB_THROTTLE": "false",
            "COMPILE_CI_REDIS_URL": self.redis_url,
            "COMPILE_CI_DATA_DIR": str(self.root / "data"),
            "COMPILE_CI_DATABASE_URL": self.database_url,
            "COMPILE_CI_PUBLIC_URL": self.web_url,
            "COMPILE_CI_CLONE_URL_TEMPLATE": (self.root / "repos").as_uri() + "/{full_name}",
            "COMPILE_CI_DEVICES": self.devices,
            # The sample repository's dependency comes from here (sample_index.py writes it before the PRs open).
            "COMPILE_CI_PIP_INDEX_URL": (self.root / "index" / "simple").as_uri(),
        }

    def _spawn(self, name: str, args: list[str], extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process
        env = {**os.environ, **self.env(), **(extra_env or {})}
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.root,
                                start_new_session=True)
        log.close()
        self.procs = [(n, p) for n, p in self.procs if n != name]
        self.procs.append((name, proc))
        self.commands[name] = args
        return proc

    def process(self, name: str) -> subprocess.Popen[bytes]:
        return dict(self.procs)[name]

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Kill one process of the stack with everything in its session (a worker and its pool children)."""
        proc = self.process(name)
        os.killpg(proc.pid, sig)
        proc.wait()

    def respawn(self, name: str) -> subprocess.Popen[bytes]:
        """Start a killed process again with the same command (Redis on the same port, like a restart)."""
        proc = self._spawn(name, self.commands[name])
        if name == "redis":
            wait_for_port(int(self.redis_url.rsplit(":", 1)[1].split("/")[0]), proc, "redis-server")
        return proc

    def start(self) -> Stack:
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "repos").mkdir(exist_ok=True)
        self.emulator.start()
        self._start_redis()
        # Create the schema once, before several processes would race to.
        Store(self.env()["COMPILE_CI_DATABASE_URL"]).engine.dispose()
        self._start_web()
        if self.with_workers:
            self.start_workers()
        return self

    def _start_redis(self) -> None:
        server = shutil.which("redis-server")
        if server is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        port = free_port()
        proc = self._spawn("redis", [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                     "--appendonly", "no", "--dir", str(self.root)])
        wait_for_port(port, proc, "redis-server")
        self.redis_url = f"redis://127.0.0.1:{port}/0"

    def _start_web(self) -> None:
        port, front_port = free_port(), free_port()
        self.web_url = f"http://127.0.0.1:{front_port if self.front else port}"
        proc = self._spawn("web", gunicorn_command(f"127.0.0.1:{port}", self.web_workers, self.web_threads))
        wait_for_port(port, proc, "gunicorn")
        if self.front:
            # Under /tmp, not root: nginx's workers (nobody, when started as root) must reach their temp files.
            self._front_dir = Path(tempfile.mkdtemp(prefix="compile-ci-front-"))
            command = front_command(f"127.0.0.1:{front_port}", f"127.0.0.1:{port}", temp_dir=self._front_dir)
            wait_for_port(front_port, self._spawn("front", command), "nginx")

    def start_workers(self) -> None:
        celery = [sys.executable, "-m", "celery", "-A", "service.worker"]
        worker = [*celery, "worker", "--loglevel", "INFO", "--without-heartbeat", "--without-mingle",
                  "--without-gossip"]
        # Reports never wait behind a long job: the github queue has its own (threaded) worker.
        self._spawn("worker-github", [*worker, "-Q", "github", "-P", "threads", "-c", "4", "-n", "github@%h"])
        self._spawn("worker-cpu", [*worker, "-Q", "cpu", "-c", str(self.cpu_slots), "-n", "cpu@%h"],
                    {"COMPILE_CI_JOB_SLOTS": str(self.cpu_slots)})
        if "cuda" in self.devices.split(","):
            for index in range(self.cuda_workers):
                pinned = {"COMPILE_CI_GPUS": str(index)} if self.cuda_workers > 1 else {}
                self._spawn(f"worker-cuda{index}", [*worker, "-Q", "cuda", "-c", "1", "-n", f"cuda{index}@%h"],
                            pinned)
        # The reaper's schedule: exactly one beat, as in a deployment.
        schedule = str(self.root / "data" / "celerybeat-schedule")
        self._spawn("beat", [*celery, "beat", "--loglevel", "INFO", "-s", schedule])

    def check_alive(self) -> None:
        """Raise if a process of the stack died: waiting on it would only time out."""
        for name, proc in self.procs:
            if proc.poll() is not None:
                tail = (self.root / f"{name}.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{name} exited with code {proc.returncode}; end of its log:\n{tail}")

    def _catch_signals(self) -> None:
        if threading.current_thread() is threading.main_thread():
            for number in STOP_SIGNALS:
                self._previous_handlers[number] = signal.signal(number, _stop_by_signal)

    def stop(self) -> None:
        # A second signal while stopping (an impatient Ctrl-C) must not leave half of the stack behind.
        if threading.current_thread() is threading.main_thread():
            for number in (*STOP_SIGNALS, signal.SIGINT):
                previous = signal.signal(number, signal.SIG_IGN)
                self._previous_handlers.setdefault(number, previous)
        try:
            self._stop_processes()
        finally:
            for number, handler in self._previous_handlers.items():
                if threading.current_thread() is threading.main_thread():
                    signal.signal(number, handler)
            self._previous_handlers.clear()

    def _stop_processes(self) -> None:
        for _name, proc in reversed(self.procs):
            if proc.poll() is None:
                # The whole session at once (a worker's pool children too: no running job is waited for); what
                # their jobs leave in the engine is swept below.
                os.killpg(proc.pid, signal.SIGTERM)
        for _name, proc in reversed(self.procs):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # whatever of its session is left
        self.procs.clear()
        self._sweep_jobs()
        self.emulator.stop()
        if self._front_dir is not None:
            shutil.rmtree(self._front_dir, ignore_errors=True)

    def _sweep_jobs(self) -> None:
        """Every worker is gone: what their jobs left in the engine (a job killed mid-run, a pre-started container
        its worker had no time to remove) goes now, not at the deployment's next start or its own deadline."""
        if not (self.with_workers and self.redis_url):
            return
        try:
            from runners.docker_engine import ENGINE_ERRORS, engine_answers
            from runners.docker_runner import DockerRunner
        except ImportError:
            return  # no Docker SDK: the jobs ran on the LocalRunner
        if not engine_answers():
            return
        runner = DockerRunner(deployment=Settings.from_env(self.env()).deployment)
        try:
            runner.sweep_leftovers(is_orphan=lambda _job: True)
        except ENGINE_ERRORS:
            pass
        finally:
            runner.close()

    def __enter__(self) -> Stack:
        self._catch_signals()
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
