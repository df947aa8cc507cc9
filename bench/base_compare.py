"""What judging pull requests against their base costs in runner time.

Runner time of a pull request = the summed wall time of the jobs it made a runner do. Three cases, on a private
Redis, the GitHub emulator, an embedded Celery worker (one job at a time) and LocalRunner, running one built-in suite:

- without: a pull request with no base (base sha 0…0) and `flaky_reruns = 0`, judged as before this feature;
- warm: a pull request whose base already ran (a second pull request on the same base reuses the base run);
- cold: the first pull request on a base, which schedules the base run (its jobs counted with the head's).

After one unmeasured warm-up run (the compile cache fills), `--pairs` pairs of (without, warm) run interleaved, each
pull request a new head sha; the ratio is the sum of warm runner time over the sum of without. Run from the
repository root as a module (run as a script, `bench/suites.py` would shadow the `suites` package):
`python -m bench.base_compare [--suite correctness] [--pairs 3]`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from celery.contrib.testing.worker import start_worker

from bench.private_stack import private_stack
from service.config import Settings
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.sandbox.deliveries import pull_request_event, signed
from service.devkit.sandbox.sample_repo import commit_file
from service.devkit.sandbox.stack import APP_ID, INSTALLATION_ID
from service.jobs.tasks import create_worker_celery
from service.store import Store
from service.web.app import create_app

ROOT = Path(__file__).resolve().parent.parent
FULL_NAME = "bench/base-compare"


def settings_for(root: Path, redis_url: str, github_url: str, key: str) -> Settings:
    # The job's interpreter imports `suites` (the plugin: in-job re-runs) from this checkout.
    python = root / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={ROOT} exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return Settings.from_env({
        "COMPILE_CI_RUNNER_PYTHON": str(python),
        "COMPILE_CI_WEBHOOK_SECRET": "bench-secret", "COMPILE_CI_GITHUB_APP_ID": str(APP_ID),
        "COMPILE_CI_GITHUB_PRIVATE_KEY": key, "COMPILE_CI_GITHUB_API_URL": github_url,
        "COMPILE_CI_GITHUB_THROTTLE": "false", "COMPILE_CI_REDIS_URL": redis_url,
        "COMPILE_CI_DATA_DIR": str(root / "data"), "COMPILE_CI_PUBLIC_URL": "http://ci.example.test",
        "COMPILE_CI_CLONE_URL_TEMPLATE": (root / "repos").as_uri() + "/{full_name}",
        "COMPILE_CI_DEVICES": "cpu", "COMPILE_CI_RUNNER": "local",
        # A host whose torch is another version (a GPU host's) names it, as a deployment would; a bench may try the
        # warm start (runners/warm_start.py, runners/docker_prestart.py) or the DockerRunner (COMPILE_CI_RUNNER).
        **{k: v for k, v in os.environ.items()
           if k in ("COMPILE_CI_TORCH_VERSIONS", "COMPILE_CI_WARM_START", "COMPILE_CI_PRESTART",
                     "COMPILE_CI_RUNNER")},
    })


class Bench:
    def __init__(self, settings: Settings, emulator: GitHubEmulator, repo: Path) -> None:
        self.settings, self.emulator, self.repo = settings, emulator, repo
        self.store = Store(settings.database_url)
        self.number = 0

    def pull_request(self, branch_from: str, config: str, base_sha: str) -> float:
        """Open one pull request (a new head sha) and wait until its check runs are final; its runner seconds."""
        self.number += 1
        branch = f"pr{self.number}"
        subprocess.run(["git", "-C", str(self.repo), "branch", "-q", branch, branch_from], check=True)
        commit_file(self.repo, branch, ".compile-ci.toml", config, "config")
        sha = commit_file(self.repo, branch, "notes.md", f"pull request {self.number}\n", "docs")
        payload = pull_request_event("opened", full_name=FULL_NAME, repo_id=4100, installation_id=INSTALLATION_ID,
                                     clone_url=f"https://github.com/{FULL_NAME}.git", number=self.number,
                                     head_sha=sha, head_ref=branch, base_sha=base_sha)
        headers, body = signed("bench-secret", "pull_request", payload)
        assert create_app(self.settings).test_client().post("/webhook", data=body, headers=headers).status_code == 202
        compared = base_sha != "0" * 40
        while True:
            runs = [r for r in self.emulator.check_runs(FULL_NAME) if r["head_sha"] == sha]
            if runs and all(r["status"] == "completed" and (not compared or "Compared with the base"
                                                             in r["output"]["summary"]) for r in runs):
                break
            time.sleep(0.2)
        (run,) = self.store.runs_at_sha(FULL_NAME, sha)
        seconds = sum(j.duration_s or 0.0 for j in self.store.jobs_of(run.id))
        return seconds

    def base_seconds(self) -> float:
        return sum(j.duration_s or 0.0 for r in self.store.recent_runs(500) if r.trigger == "base"
                   for j in self.store.jobs_of(r.id))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--suite", default="correctness")
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="compile-ci-bench-base-"))
    with private_stack(root, FULL_NAME, INSTALLATION_ID) as (redis_url, emulator, private_key):
        settings = settings_for(root, redis_url, emulator.url, private_key)
        repo = root / "repos" / FULL_NAME
        repo.mkdir(parents=True)
        subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
        base = commit_file(repo, "main", "README.md", "bench\n", "base")
        run_only = f'[suites]\ndevices = ["cpu"]\nrun = ["{args.suite}"]\n'
        without, with_base = run_only + "flaky_reruns = 0\n", run_only
        app = create_worker_celery(settings, suites_dir=ROOT / "suites")
        with start_worker(app, pool="threads", concurrency=2, perform_ping_check=False, shutdown_timeout=60,
                          queues=["cpu", "github"]):
            bench = Bench(settings, emulator, repo)
            warmup = bench.pull_request("main", without, "0" * 40)
            print(f"warm-up (compile cache fills, not counted): {warmup:.1f} s", flush=True)
            cold_head = bench.pull_request("main", with_base, base)
            cold_base = bench.base_seconds()
            print(f"cold: head {cold_head:.1f} s + base run {cold_base:.1f} s", flush=True)
            pairs = []
            for n in range(args.pairs):
                plain = bench.pull_request("main", without, "0" * 40)
                warm = bench.pull_request("main", with_base, base)
                pairs.append((plain, warm))
                print(f"pair {n + 1}: without {plain:.1f} s, with the base already run {warm:.1f} s, "
                      f"ratio {warm / plain:.3f}", flush=True)
            assert bench.base_seconds() == cold_base, "the base run ran again instead of being reused"
        assert emulator.errors == [], emulator.errors
    plain_sum, warm_sum = sum(p for p, _ in pairs), sum(w for _, w in pairs)
    mean_plain = plain_sum / len(pairs)
    print(f"warm: runner time with comparison ÷ without = {warm_sum / plain_sum:.3f} ({args.pairs} pairs)")
    print(f"cold: (head + base run) ÷ without = {(cold_head + cold_base) / mean_plain:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
