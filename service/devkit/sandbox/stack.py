"""The service's processes on one machine: Redis, the web app (gunicorn), Celery workers, the emulator."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from service.devkit.github_emulator import GitHubEmulator
from service.store import Store
from service.web.serving import DEFAULT_THREADS, gunicorn_command

APP_ID = 424242
INSTALLATION_ID = 4242


def free_port() -> int:
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
                 web_threads: int = DEFAULT_THREADS) -> None:
        self.root = root
        self.web_threads = web_threads
        self.with_workers = workers
        self.devices = devices
        self.web_workers = web_workers
        self.webhook_secret = secrets.token_hex(20)
        self.private_key, public_key = app_keypair()
        self.emulator = GitHubEmulator(app_id=APP_ID, public_key_pem=public_key)
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.redis_url = ""
        self.web_url = ""

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
            "COMPILE_CI_DATABASE_URL": f"sqlite:///{self.root / 'data' / 'compile-ci.sqlite3'}",
            "COMPILE_CI_PUBLIC_URL": self.web_url,
            "COMPILE_CI_CLONE_URL_TEMPLATE": (self.root / "repos").as_uri() + "/{full_name}",
            "COMPILE_CI_DEVICES": self.devices,
        }

    def _spawn(self, name: str, args: list[str], extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process
        env = {**os.environ, **self.env(), **(extra_env or {})}
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.root,
                                start_new_session=True)
        log.close()
        self.procs.append((name, proc))
        return proc

    def start(self) -> Stack:
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "repos").mkdir(exist_ok=True)
        self.emulator.start()
        self._start_redis()
        # Create the schema once, before several processes would race to.
        Store(self.env()["COMPILE_CI_DATABASE_URL"])
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
        port = free_port()
        self.web_url = f"http://127.0.0.1:{port}"
        proc = self._spawn("web", gunicorn_command(f"127.0.0.1:{port}", self.web_workers, self.web_threads))
        wait_for_port(port, proc, "gunicorn")

    def start_workers(self) -> None:
        celery = [sys.executable, "-m", "celery", "-A", "service.worker", "worker", "--loglevel", "INFO",
                  "--without-heartbeat", "--without-mingle", "--without-gossip"]
        # Reports never wait behind a long job: the github queue has its own (threaded) worker.
        self._spawn("worker-github", [*celery, "-Q", "github", "-P", "threads", "-c", "4", "-n", "github@%h"])
        self._spawn("worker-cpu", [*celery, "-Q", "cpu", "-c", "1", "-n", "cpu@%h"])

    def check_alive(self) -> None:
        """Raise if a process of the stack died: waiting on it would only time out."""
        for name, proc in self.procs:
            if proc.poll() is not None:
                tail = (self.root / f"{name}.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{name} exited with code {proc.returncode}; end of its log:\n{tail}")

    def stop(self) -> None:
        for _name, proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for _name, proc in reversed(self.procs):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs.clear()
        self.emulator.stop()

    def __enter__(self) -> Stack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
