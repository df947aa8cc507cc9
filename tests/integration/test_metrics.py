"""Operating the service: /metrics after a flow through the deployed processes, and one job followed in JSON logs.

The stack is the sandbox's (gunicorn with two workers, Redis, separate Celery worker processes for the github and
cpu queues, beat, the GitHub emulator); jobs run the repository's own tiny tests with LocalRunner, so the flow
takes seconds while every count crosses a process boundary: two gunicorn workers write one set of counters
(multiprocess mode), and the cpu worker's job runs in a prefork child while its parent serves the port.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from service.devkit.sandbox.deliveries import pull_request_event, signed
from service.devkit.sandbox.main import wait_until
from service.devkit.sandbox.sample_repo import commit_file
from service.devkit.sandbox.stack import INSTALLATION_ID, Stack, free_port, wait_for_port
from service.store import Job, Store

FULL_NAME = "octo/gauges"
CONFIG = '[suites]\nrun = ["repo"]\ndevices = ["cpu"]\nrepo_tests = ["checks"]\n'
CHECK = ("import pathlib\n\ndef test_verdict():\n"
         "    assert (pathlib.Path(__file__).parents[1] / 'verdict.txt').read_text().strip() == 'pass'\n")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, dict[str, int]]]:
    root = tmp_path_factory.mktemp("metrics-stack")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("COMPILE_CI_RUNNER", "local")
        env.setenv("COMPILE_CI_LOG_FORMAT", "json")
        env.setenv("COMPILE_CI_METRICS_DIR", str(root / "metrics"))
        with Stack(root, workers=False) as running:
            ports = {"worker-github": free_port(), "worker-cpu": free_port()}
            celery = [sys.executable, "-m", "celery", "-A", "service.worker"]
            worker = [*celery, "worker", "--loglevel", "INFO", "--without-heartbeat", "--without-mingle",
                      "--without-gossip"]
            # Two workers on one host need two ports; in a deployment each pod or container has its own address.
            spawn = running._spawn  # noqa: SLF001 - the sandbox's own process bookkeeping, with an extra variable
            procs = {
                "worker-github": spawn("worker-github", [*worker, "-Q", "github", "-P", "threads", "-c", "4",
                                                        "-n", "github@%h"],
                                       {"COMPILE_CI_METRICS_PORT": str(ports["worker-github"])}),
                "worker-cpu": spawn("worker-cpu", [*worker, "-Q", "cpu", "-c", "1", "-n", "cpu@%h"],
                                    {"COMPILE_CI_METRICS_PORT": str(ports["worker-cpu"])}),
            }
            for name, proc in procs.items():
                wait_for_port(ports[name], proc, name)
            yield running, ports


def post(stack: Stack, event: str, payload: dict[str, Any] | bytes, delivery: str, secret: str = "") -> int:
    headers, body = signed(secret or stack.webhook_secret, event, payload, delivery_id=delivery)
    request = urllib.request.Request(stack.web_url + "/webhook", data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def json_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def flow(stack: tuple[Stack, dict[str, int]]) -> dict[str, Any]:
    running, _ports = stack
    repo = running.root / "repos" / FULL_NAME
    repo.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    commit_file(repo, "main", ".compile-ci.toml", CONFIG, "config")
    commit_file(repo, "main", "checks/test_verdict.py", CHECK, "a test")
    base = commit_file(repo, "main", "verdict.txt", "pass\n", "passes")
    good = commit_file(repo, "good", "notes.md", "fine\n", "docs")
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "-b", "bad", base], check=True)
    bad = commit_file(repo, "bad", "verdict.txt", "fail\n", "breaks it")
    running.emulator.add_repo(FULL_NAME)
    running.emulator.add_installation(INSTALLATION_ID, repos=[FULL_NAME])
    statuses = []
    for number, sha, branch in ((1, good, "good"), (2, bad, "bad")):
        payload = pull_request_event("opened", full_name=FULL_NAME, repo_id=4101, installation_id=INSTALLATION_ID,
                                     clone_url=f"https://github.com/{FULL_NAME}.git", number=number, head_sha=sha,
                                     head_ref=branch, base_sha=base)
        statuses.append(post(running, "pull_request", payload, f"delivery-{number}"))
        if number == 1:
            statuses.append(post(running, "pull_request", payload, "delivery-1"))  # GitHub's redelivery
            statuses.append(post(running, "pull_request", payload, "forged", secret="not-the-secret"))

    def completed() -> bool:
        running.check_alive()
        runs = running.emulator.check_runs(FULL_NAME)
        return len(runs) == 2 and all(r["status"] == "completed" for r in runs)

    wait_until(completed, 600, "both check runs to complete", poll_s=0.2)
    # Both pull requests share one base commit: compile-ci runs it once, at low priority, after the heads.
    store = Store(running.env()["COMPILE_CI_DATABASE_URL"])

    def every_job_done() -> bool:
        running.check_alive()
        with store.session() as session:
            states = [job.state for job in session.query(Job).all()]
        return len(states) == 3 and all(state == "completed" for state in states)

    wait_until(every_job_done, 600, "the heads' jobs and the base run's job to complete", poll_s=0.2)
    return {"statuses": statuses, "runs": {r["head_sha"]: r for r in running.emulator.check_runs(FULL_NAME)},
            "good": good, "bad": bad}


def test_web_metrics_count_the_flows_deliveries_across_gunicorn_workers(stack: tuple[Stack, dict[str, int]],
                                                                       flow: dict[str, Any]) -> None:
    running, _ports = stack
    assert flow["statuses"] == [202, 200, 401, 202]
    # A queued job's message can be sent again (a second plan of its run, the reaper); the worker drops the extra one
    # at once (its job is done or leased), but on a loaded host it may still wait when the last job completes (seen:
    # the base run's job, a second time, 11 ms after): the queue must empty, not be empty at that instant.
    wait_until(lambda: value(scrape(running.web_url + "/metrics"), "compile_ci_queue_depth", queue="cpu") == 0, 60,
               "the cpu queue to empty", poll_s=0.2)
    samples = scrape(running.web_url + "/metrics")
    total = "compile_ci_webhook_deliveries_total"
    assert value(samples, total, event="pull_request", status="202") == 2
    assert value(samples, total, event="pull_request", status="200") == 1  # the redelivery, answered once
    assert value(samples, total, event="unverified", status="401") == 1  # the forged one names no event
    assert value(samples, "compile_ci_webhook_ack_seconds_count") == 4
    assert value(samples, "compile_ci_jobs", state="queued") == 0
    assert value(samples, "compile_ci_jobs", state="running") == 0
    assert value(samples, "compile_ci_queue_depth", queue="cpu") == 0
    assert ("compile_ci_queue_depth", (("queue", "github"),)) in samples


def test_cpu_worker_port_has_job_durations_by_conclusion(stack: tuple[Stack, dict[str, int]],
                                                         flow: dict[str, Any]) -> None:
    _running, ports = stack
    assert flow["runs"][flow["good"]]["conclusion"] == "success"
    assert flow["runs"][flow["bad"]]["conclusion"] == "failure"
    samples = scrape(f"http://127.0.0.1:{ports['worker-cpu']}/metrics")
    duration = "compile_ci_job_duration_seconds_count"
    # The good head and the base run's job (verdict.txt says "pass" at the base) passed; the bad head failed.
    assert value(samples, duration, suite="repo", device="cpu", conclusion="success") == 2
    assert value(samples, duration, suite="repo", device="cpu", conclusion="failure") == 1
    assert value(samples, "compile_ci_job_start_latency_seconds_count", device="cpu") == 3
    assert value(samples, "compile_ci_errors_total", source="runner") == 0


def test_github_worker_port_counts_api_calls_and_rate_limit(stack: tuple[Stack, dict[str, int]],
                                                            flow: dict[str, Any]) -> None:
    _running, ports = stack
    samples = scrape(f"http://127.0.0.1:{ports['worker-github']}/metrics")
    created = value(samples, "compile_ci_github_api_calls_total", method="POST", status="201")
    patched = value(samples, "compile_ci_github_api_calls_total", method="PATCH", status="200")
    assert created >= 2  # both check runs, plus installation tokens
    assert patched >= 2  # in_progress, then completed, for each
    assert value(samples, "compile_ci_github_rate_limit_remaining") == 4999  # what the emulator answers


def test_one_job_is_followed_from_its_delivery_through_the_workers_in_json_logs(
        stack: tuple[Stack, dict[str, int]], flow: dict[str, Any]) -> None:
    running, _ports = stack
    job_id = flow["runs"][flow["bad"]]["external_id"]
    cpu = [line for line in json_lines(running.root / "worker-cpu.log") if line.get("job_id") == job_id]
    assert cpu, "the cpu worker logged nothing about the job"
    run_id = cpu[0]["run_id"]
    # Lines before the runner takes the job carry no attempt (it is not known yet); every later one carries 1.
    assert [line for line in cpu if "attempt" in line], "no line names the attempt"
    assert all(line["run_id"] == run_id and line["attempt"] == 1 for line in cpu if "attempt" in line)
    assert any("compile_ci.run_job" in line.get("task", "") for line in cpu)
    web = [line for line in json_lines(running.root / "web.log") if line.get("run_id") == run_id]
    assert [line["delivery_id"] for line in web] == ["delivery-2"]
    reports = [line for line in json_lines(running.root / "worker-github.log") if line.get("job_id") == job_id]
    assert reports and all(line["run_id"] == run_id for line in reports)


def _descends(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            return False
    return False


def test_a_stopped_worker_leaves_no_directory_of_its_own_behind(stack: tuple[Stack, dict[str, int]],
                                                                 flow: dict[str, Any]) -> None:
    # Last in this module: it stops the cpu worker as the stack stops it (SIGTERM to its session). Its metrics
    # directory and its warm interpreters' (their own sessions: they outlive it by a moment) were left in /tmp before.
    running, _ports = stack
    (worker,) = [proc for name, proc in running.procs if name == "worker-cpu"]
    metrics = list(Path(tempfile.gettempdir()).glob(f"compile-ci-metrics-{worker.pid}-*"))
    warm = {}
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"suites.warm_process" in argv and _descends(int(entry.name), worker.pid):
            warm[os.pidfd_open(int(entry.name))] = Path(os.fsdecode(argv[argv.index(b"suites.warm_process") + 2]))
    assert len(metrics) == 1 and metrics[0].is_dir() and warm, (metrics, warm)
    os.killpg(worker.pid, signal.SIGTERM)
    worker.wait(timeout=60)
    for gone, given in warm.items():
        assert select.select([gone], [], [], 60)[0], f"a warm interpreter ({given}) outlived its worker"
        os.close(gone)
        assert not given.parent.exists()
    assert not metrics[0].exists()
