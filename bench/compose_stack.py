"""The compose stack (deploy/compose.yaml) on this host, with locally built images, running the sandbox flow.

Builds what is missing (runner, service, and Debian-based Redis/PostgreSQL images on the local base), brings the
stack up with docker-compose, opens the sandbox's two pull requests against the GitHub emulator on the host, waits
for the check runs (PR #1 green, PR #2 red naming its model, cuda neutral), prints timings and tears it down.
Slow (image builds, a cold compile cache), so a script rather than a test: `python bench/compose_stack.py`.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from runners.docker_container import DEPLOYMENT_LABEL
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.sandbox.main import (
    CHECK_RUNS,
    FULL_NAME,
    _as_expected,
    open_sample_pull_requests,
    print_check_runs,
    wait_until,
)
from service.devkit.sandbox.stack import APP_ID, app_keypair, free_port

SERVICE_UID = 10001  # the service image's user: it owns the data directory it writes

ROOT = Path(__file__).resolve().parent.parent
PROJECT = "compile-ci-bench"
LOCAL_IMAGES = {"compile-ci/redis:local": "redis.Dockerfile", "compile-ci/postgres:local": "postgres.Dockerfile"}


@dataclass
class ComposeStack:
    """What the sandbox helpers use of a stack: where repos live, the emulator, the webhook's secret and URL."""

    root: Path
    emulator: GitHubEmulator
    webhook_secret: str
    web_url: str

    def check_alive(self) -> None:
        states = compose("ps", "--services", "--filter", "status=running", capture=True).split()
        missing = {"front", "web", "worker-github", "beat", "worker-cpu", "redis", "postgres"} - set(states)
        if missing:
            raise RuntimeError(f"compose services not running: {sorted(missing)}")


def compose(*args: str, capture: bool = False, env: dict[str, str] | None = None) -> str:
    command = ["docker-compose", "-p", PROJECT, "-f", str(ROOT / "deploy" / "compose.yaml"), *args]
    done = subprocess.run(command, env={**os.environ, **(env or _ENV)}, capture_output=capture, text=True, check=True)
    return done.stdout if capture else ""


_ENV: dict[str, str] = {}


def build_images() -> None:
    subprocess.run([sys.executable, "-m", "service.cli", "images", "build", "cpu", "service", "--local-base",
                    "--if-changed"], check=True, cwd=ROOT)
    for tag, dockerfile in LOCAL_IMAGES.items():
        if subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode != 0:
            subprocess.run(["docker", "build", "-q", "--network", "host", "-t", tag, "-f",
                            str(ROOT / "deploy" / "local" / dockerfile), str(ROOT / "deploy" / "local")],
                           check=True, env={**os.environ, "DOCKER_BUILDKIT": "0"})


def host_address() -> str:
    """The host as containers reach it: its address on the default bridge (docker0)."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "docker0"], capture_output=True, text=True, check=True)
    return out.stdout.split(" inet ")[1].split("/")[0]


def main() -> int:
    build_images()
    root = Path(tempfile.mkdtemp(prefix="compile-ci-compose-"))
    data = root / "data"
    (data / "repos").mkdir(parents=True)
    private_key, public_key = app_keypair()
    key_file = data / "app-key.pem"
    key_file.write_text(private_key)
    subprocess.run(["chown", "-R", f"{SERVICE_UID}:{SERVICE_UID}", str(data)], check=True)
    gateway, web_port = host_address(), free_port()
    emulator = GitHubEmulator(app_id=APP_ID, public_key_pem=public_key, host="0.0.0.0").start()
    emulator.state.base_url = emulator.url.replace("0.0.0.0", gateway)
    secret = os.urandom(16).hex()
    settings = {
        "COMPILE_CI_WEBHOOK_SECRET": secret, "COMPILE_CI_GITHUB_APP_ID": str(APP_ID),
        "COMPILE_CI_GITHUB_PRIVATE_KEY_FILE": str(key_file), "COMPILE_CI_GITHUB_API_URL": emulator.url,
        "COMPILE_CI_GITHUB_THROTTLE": "false", "COMPILE_CI_REDIS_URL": "redis://redis:6379/0",
        "COMPILE_CI_DATABASE_URL": "postgresql+psycopg://compileci:compileci@postgres/compileci",
        "COMPILE_CI_PUBLIC_URL": f"http://127.0.0.1:{web_port}", "COMPILE_CI_DEVICES": "cpu",
        "COMPILE_CI_CLONE_URL_TEMPLATE": (data / "repos").as_uri() + "/{full_name}",
        # The sample repository's dependency: open_sample_pull_requests writes this index under the stack's root.
        "COMPILE_CI_PIP_INDEX_URL": (data / "index" / "simple").as_uri(),
    }
    env_file = root / "compile-ci.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    docker_gid = os.stat("/var/run/docker.sock").st_gid
    _ENV.update({"COMPILE_CI_ENV_FILE": str(env_file), "COMPILE_CI_HOST_DATA_DIR": str(data),
                 "COMPILE_CI_WEB_PORT": str(web_port), "COMPILE_CI_DOCKER_GID": str(docker_gid),
                 "COMPILE_CI_REDIS_IMAGE": "compile-ci/redis:local",
                 "COMPILE_CI_POSTGRES_IMAGE": "compile-ci/postgres:local"})
    stack = ComposeStack(data, emulator, secret, f"http://127.0.0.1:{web_port}")
    started = time.monotonic()
    ok = False
    try:
        compose("up", "-d")
        up_s = time.monotonic() - started
        wait_until(lambda: _answers(stack.web_url), 120, "the web service")
        ready_s = time.monotonic() - started
        repo, pulls = open_pulls(stack)
        runs = wait_for_check_runs(stack, 900)
        print_check_runs(runs, pulls)
        ok = _as_expected(runs, repo.good_sha, repo.buggy_sha) and not emulator.errors
        print(f"\n{'OK' if ok else 'UNEXPECTED'}: compose up {up_s:.0f} s, web answering {ready_s:.0f} s, "
              f"sandbox flow done {time.monotonic() - started:.0f} s; emulator errors: {emulator.errors}")
    finally:
        if not ok:
            compose("logs", "--tail", "60")
        compose("down", "-v")
        # The job containers are the workers' (DockerRunner), not compose's: a worker stopped mid-job leaves its
        # containers running until their deadline, so remove this deployment's.
        deployment = hashlib.sha256(settings["COMPILE_CI_DATABASE_URL"].encode()).hexdigest()[:12]
        left = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={DEPLOYMENT_LABEL}={deployment}"],
                              capture_output=True, text=True, check=False).stdout.split()
        if left:
            subprocess.run(["docker", "rm", "-f", *left], capture_output=True, check=False)
        emulator.stop()
        subprocess.run(["rm", "-rf", str(root)], check=False)
    return 0 if ok else 1


def open_pulls(stack: ComposeStack) -> tuple[object, dict[str, int]]:
    """The sandbox's two pull requests; the repository is handed to the service's uid before any webhook, since
    git refuses to read a repository another user owns."""

    def hand_to_service(_repo: object) -> None:
        subprocess.run(["chown", "-R", f"{SERVICE_UID}:{SERVICE_UID}", str(stack.root)], check=True)

    return open_sample_pull_requests(stack, prepare=hand_to_service)


def wait_for_check_runs(stack: ComposeStack, timeout_s: float) -> list[dict[str, object]]:
    def done() -> bool:
        stack.check_alive()
        runs = stack.emulator.check_runs(FULL_NAME)
        return len(runs) >= CHECK_RUNS and all(r["status"] == "completed" for r in runs)

    wait_until(done, timeout_s, "the check runs to complete")
    return stack.emulator.check_runs(FULL_NAME)


def _answers(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url + "/", timeout=2):
            return True
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(main())
