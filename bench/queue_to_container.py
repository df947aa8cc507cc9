"""Time from a pull request's webhook, and from its job being queued, to the job's container running.

    python bench/queue_to_container.py [--prs 4]

Runs the sandbox stack (gunicorn, Redis, Celery workers for the github and cpu queues, the DockerRunner, the GitHub
emulator), then opens pull requests one at a time, each waiting for the previous job to finish, so every job
meets an idle cpu worker. The container's start comes from `docker events` (the engine's own clock, this host);
"queued" is the job row's `queued_at`, written when planning creates the job, just before its check run and its
`run_job` message, so the queue figure also holds the check-run POST, the Celery hop, the lease, the checkout and
the container's create and start. Prints a table and a JSON line. Needs the cpu runner image
(`compile-ci images build cpu --local-base`) and a Docker engine.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runners.docker_container import LABEL  # noqa: E402
from service.devkit.sandbox.deliveries import pull_request_event  # noqa: E402
from service.devkit.sandbox.main import FULL_NAME, REPO_ID, post_webhook, wait_until  # noqa: E402
from service.devkit.sandbox.sample_repo import SampleRepo, create_sample_repo  # noqa: E402
from service.devkit.sandbox.stack import INSTALLATION_ID, Stack  # noqa: E402
from service.store import Store  # noqa: E402


class ContainerStarts:
    """Job id -> wall-clock time its container started, from `docker events`."""

    def __init__(self) -> None:
        self.started: dict[str, float] = {}
        self._proc = subprocess.Popen(
            ["docker", "events", "--filter", f"label={LABEL}", "--filter", "event=start", "--format", "{{json .}}"],
            stdout=subprocess.PIPE, text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            event = json.loads(line)
            self.started[event["Actor"]["Attributes"][LABEL]] = event["timeNano"] / 1e9

    def close(self) -> None:
        self._proc.terminate()


def one_pull_request(stack: Stack, store: Store, starts: ContainerStarts, repo: SampleRepo,
                     number: int) -> dict[str, float]:
    branch = f"bench-{number}"
    stack.emulator.add_pull(FULL_NAME, number, repo.good_sha, branch, "main", "octocat", "OWNER")
    payload = pull_request_event(
        "opened", full_name=FULL_NAME, repo_id=REPO_ID, clone_url=f"https://github.com/{FULL_NAME}.git",
        installation_id=INSTALLATION_ID, number=number, head_sha=repo.good_sha, head_ref=branch,
        base_sha=repo.base_sha,
    )
    sent = time.time()
    _status, answer = post_webhook(stack, "pull_request", payload)
    found = re.search(r"run ([0-9a-f]{16})", " ".join(answer.get("messages", [])))
    assert found is not None, answer
    job_id = f"{found.group(1)}-correctness-cpu"
    wait_until(lambda: job_id in starts.started, 120, f"the container of {job_id}", poll_s=0.02)
    job = store.get_job(job_id)
    assert job is not None
    queued, started = job.queued_at.replace(tzinfo=UTC).timestamp(), starts.started[job_id]
    print(f"PR #{number}: webhook -> container running {started - sent:6.2f} s   "
          f"queued -> container running {started - queued:6.2f} s", flush=True)

    def finished() -> bool:
        current = store.get_job(job_id)
        return current is not None and current.state == "completed"

    wait_until(finished, 600, f"{job_id} to finish")
    return {"webhook_to_running_s": round(started - sent, 3), "queued_to_running_s": round(started - queued, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prs", type=int, default=4)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="compile-ci-bench-queue-"))
    starts = ContainerStarts()
    rows: list[dict[str, float]] = []
    try:
        with Stack(root) as stack:
            store = Store(stack.env()["COMPILE_CI_DATABASE_URL"])
            repo = create_sample_repo(stack.root / "repos" / FULL_NAME)
            stack.emulator.add_repo(FULL_NAME)
            stack.emulator.add_installation(INSTALLATION_ID, repos=[FULL_NAME])
            for number in range(1, args.prs + 1):
                rows.append(one_pull_request(stack, store, starts, repo, number))
    finally:
        starts.close()
    queue = [row["queued_to_running_s"] for row in rows]
    hook = [row["webhook_to_running_s"] for row in rows]
    print(f"queued -> running: median {statistics.median(queue):.2f} s, max {max(queue):.2f} s; "
          f"webhook -> running: median {statistics.median(hook):.2f} s, max {max(hook):.2f} s")
    print(json.dumps({"runs": rows, "queued_to_running_median_s": statistics.median(queue),
                      "webhook_to_running_median_s": statistics.median(hook)}))


if __name__ == "__main__":
    main()
