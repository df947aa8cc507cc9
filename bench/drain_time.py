"""Queue-drain time of N pull requests on the compose stack with one and with more cpu workers.

Each cpu worker container keeps its scratch and compile caches to itself (deploy/compose.yaml, workers/<id>/);
they share the artifacts directory, Redis and PostgreSQL. For every worker count: a fresh stack on locally built
images (`docker-compose up --scale worker-cpu=N`), N pull requests opened at once, and the time from the first
webhook to the last check run completed. Workloads: `sandbox`, the sample repository's real torch.compile
`correctness (cpu)` job; `light`, the repository's own tests (`repo (cpu)`), about 2 s of pure-Python CPU work in
the same hardened job container, so the figure is the service's throughput rather than the compiler's. Then it
proves the web serves every job's log whichever worker ran it, counts the jobs each worker ran from their JSON log
lines, and reads the web's /metrics.

    python bench/drain_time.py --workers 1 2 --pulls 8 [--workload light|sandbox] [--image compile-ci/service:TAG]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import defaultdict
from pathlib import Path

from compose_stack import LOCAL_IMAGES, ROOT, SERVICE_UID, host_address

from service.devkit.github_emulator import GitHubEmulator
from service.devkit.sandbox.deliveries import pull_request_event, signed
from service.devkit.sandbox.main import FULL_NAME, wait_until
from service.devkit.sandbox.sample_repo import commit_file, create_sample_repo
from service.devkit.sandbox.stack import APP_ID, INSTALLATION_ID, app_keypair, free_port

PROJECT = "compile-ci-drain"
LIGHT_CONFIG = '[suites]\nrun = ["repo"]\ndevices = ["cpu"]\nrepo_tests = ["checks"]\n'
LIGHT_TEST = """
def _work(n):
    return sum(i * i % 7 for i in range(n))

def test_cpu_bound_work():
    assert _work(6_000_000) > 0

def test_quick():
    assert _work(1000) > 0
"""


def compose(env: dict[str, str], *args: str, capture: bool = False) -> str:
    command = ["docker-compose", "-p", PROJECT, "-f", str(ROOT / "deploy" / "compose.yaml"), *args]
    done = subprocess.run(command, env={**os.environ, **env}, capture_output=capture, text=True, check=True)
    return done.stdout if capture else ""


def fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode(errors="replace")
    except OSError as exc:
        return getattr(exc, "code", 0), ""


def drain(workers: int, pulls: int, image: str, workload: str) -> dict[str, object]:
    root = Path(tempfile.mkdtemp(prefix="compile-ci-drain-"))
    data = root / "data"
    (data / "repos").mkdir(parents=True)
    private_key, public_key = app_keypair()
    (data / "app-key.pem").write_text(private_key)
    gateway, web_port = host_address(), free_port()
    emulator = GitHubEmulator(app_id=APP_ID, public_key_pem=public_key, host="0.0.0.0").start()
    emulator.state.base_url = emulator.url.replace("0.0.0.0", gateway)
    secret = os.urandom(16).hex()
    web_url = f"http://127.0.0.1:{web_port}"
    settings = {
        "COMPILE_CI_WEBHOOK_SECRET": secret, "COMPILE_CI_GITHUB_APP_ID": str(APP_ID),
        "COMPILE_CI_GITHUB_PRIVATE_KEY_FILE": str(data / "app-key.pem"), "COMPILE_CI_GITHUB_API_URL": emulator.url,
        "COMPILE_CI_GITHUB_THROTTLE": "false", "COMPILE_CI_REDIS_URL": "redis://redis:6379/0",
        "COMPILE_CI_DATABASE_URL": "postgresql+psycopg://compileci:compileci@postgres/compileci",
        "COMPILE_CI_PUBLIC_URL": web_url, "COMPILE_CI_DEVICES": "cpu", "COMPILE_CI_LOG_FORMAT": "json",
        "COMPILE_CI_CLONE_URL_TEMPLATE": (data / "repos").as_uri() + "/{full_name}",
        # Its own label on the shared engine: a worker sweeps only its deployment's leftover job containers.
        "COMPILE_CI_DEPLOYMENT": f"drain-{secret[:8]}",
    }
    (root / "compile-ci.env").write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    env = {"COMPILE_CI_ENV_FILE": str(root / "compile-ci.env"), "COMPILE_CI_HOST_DATA_DIR": str(data),
           "COMPILE_CI_WEB_PORT": str(web_port), "COMPILE_CI_DOCKER_GID": str(os.stat("/var/run/docker.sock").st_gid),
           "COMPILE_CI_SERVICE_IMAGE": image, "COMPILE_CI_REDIS_IMAGE": "compile-ci/redis:local",
           "COMPILE_CI_POSTGRES_IMAGE": "compile-ci/postgres:local"}
    repo = create_sample_repo(data / "repos" / FULL_NAME)
    if workload == "light":
        commit_file(repo.path, "main", ".compile-ci.toml", LIGHT_CONFIG, "Run our own tests only")
        commit_file(repo.path, "main", "checks/test_work.py", LIGHT_TEST, "A test that works the CPU")
    check_name = "repo (cpu)" if workload == "light" else "correctness (cpu)"
    heads = [commit_file(repo.path, f"pr-{n}", f"notes/{n}.md", f"change {n}\n", f"Change {n}")
             for n in range(1, pulls + 1)]
    subprocess.run(["chown", "-R", f"{SERVICE_UID}:{SERVICE_UID}", str(data)], check=True)
    emulator.add_repo(FULL_NAME)
    emulator.add_installation(INSTALLATION_ID, repos=[FULL_NAME])
    try:
        compose(env, "up", "-d", "--scale", f"worker-cpu={workers}")
        wait_until(lambda: fetch(web_url + "/")[0] == 200, 180, "the web service")
        wait_until(lambda: len(compose(env, "ps", "-q", "worker-cpu", capture=True).split()) == workers, 60,
                   "the cpu workers")
        started = time.monotonic()
        for number, sha in enumerate(heads, start=1):
            emulator.add_pull(FULL_NAME, number, sha, f"pr-{number}", "main", "octocat", "OWNER")
            payload = pull_request_event("opened", full_name=FULL_NAME, repo_id=4242, installation_id=INSTALLATION_ID,
                                         clone_url=f"https://github.com/{FULL_NAME}.git", number=number,
                                         head_sha=sha, head_ref=f"pr-{number}", base_sha=repo.base_sha)
            headers, body = signed(secret, "pull_request", payload)
            request = urllib.request.Request(web_url + "/webhook", data=body, headers=headers, method="POST")
            urllib.request.urlopen(request, timeout=30).close()

        def cpu_runs() -> list[dict[str, object]]:
            return [r for r in emulator.check_runs(FULL_NAME) if r["name"] == check_name]

        wait_until(lambda: len(cpu_runs()) == pulls and all(r["status"] == "completed" for r in cpu_runs()),
                   3600, "every cpu check run", poll_s=0.5)
        drained = time.monotonic() - started
        runs = cpu_runs()
        logs_served = sum(1 for r in runs if "passed" in fetch(f"{r['details_url']}/log")[1])
        ran_by: dict[str, set[str]] = defaultdict(set)
        for line in compose(env, "logs", "--no-color", "worker-cpu", capture=True).splitlines():
            container, _, text = line.partition("|")
            if text.strip().startswith("{") and '"job_id"' in text:
                ran_by[container.strip()].add(json.loads(text)["job_id"])
        metrics = fetch(web_url + "/metrics")[1]
        series = 'compile_ci_webhook_deliveries_total{event="pull_request",status="202"}'
        accepted = next((ln.split()[-1] for ln in metrics.splitlines() if ln.startswith(series)), "")
        return {"workload": workload, "cpu_workers": workers, "pulls": pulls, "drain_s": round(drained, 1),
                "conclusions": sorted({str(r["conclusion"]) for r in runs}),
                "logs_served_by_web": f"{logs_served}/{len(runs)}",
                "jobs_per_worker": sorted(len(v) for v in ran_by.values()),
                "metrics_deliveries_202": accepted, "emulator_errors": len(emulator.errors)}
    finally:
        compose(env, "down", "-v")
        emulator.stop()
        subprocess.run(["rm", "-rf", str(root)], check=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--pulls", type=int, default=8)
    parser.add_argument("--image", default="compile-ci/service:latest", help="the service image to run")
    parser.add_argument("--workload", choices=("light", "sandbox"), default="light")
    args = parser.parse_args()
    missing = [tag for tag in (args.image, *LOCAL_IMAGES) if subprocess.run(
        ["docker", "image", "inspect", tag], capture_output=True).returncode != 0]
    if missing:
        print(f"missing images {missing}: python bench/compose_stack.py builds them", file=sys.stderr)
        return 2
    for workers in args.workers:
        print(json.dumps(drain(workers, args.pulls, args.image, args.workload)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
