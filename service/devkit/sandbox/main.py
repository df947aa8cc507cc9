"""`compile-ci sandbox`: two pull requests of a sample repository, end to end, against the emulator."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from service.compare.comment import PENDING_NOTE
from service.compare.job_verdict import BASE_PENDING
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.sandbox.declared import FULL_NAME as DECLARED_NAME
from service.devkit.sandbox.declared import SUITES as DECLARED_SUITES
from service.devkit.sandbox.declared import generated_code_summary, open_declared_pull_request, save_pages
from service.devkit.sandbox.deliveries import pull_request_event, signed
from service.devkit.sandbox.progress import Progress, comments_of, where_to_look
from service.devkit.sandbox.sample_index import write_sample_index
from service.devkit.sandbox.sample_repo import SampleRepo, create_sample_repo
from service.devkit.sandbox.stack import INSTALLATION_ID, Stack
from service.store import Store
from service.store.rows import INTERNAL_TRIGGERS

FULL_NAME = "sandbox/model-zoo"
REPO_ID = 700001
# Two pull requests x (correctness, repo) x (cpu, cuda).
CHECK_RUNS = 8


def post_webhook(stack: Any, event: str, payload: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    headers, body = signed(stack.webhook_secret, event, payload)
    request = urllib.request.Request(stack.web_url + "/webhook", data=body, headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        text = response.read()
        return response.status, json.loads(text) if text else {}


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str, poll_s: float = 0.5) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(poll_s)


def _history(check_run: dict[str, Any]) -> str:
    return " → ".join(GitHubEmulator.status_sequence(check_run))


def print_check_runs(check_runs: list[dict[str, Any]], pulls: dict[str, int]) -> None:
    for run in sorted(check_runs, key=lambda r: (pulls.get(r["head_sha"], 0), r["name"])):
        print(f"PR #{pulls.get(run['head_sha'], '?')}  {run['name']:<22} {run['conclusion'] or run['status']:<10} "
              f"{run['output'].get('title') or ''}")
        print(f"      {_history(run)}")
        print(f"      {run['details_url']}")
        for line in (run["output"].get("summary") or "").splitlines():
            if line.startswith("- `"):
                print(f"      failing: {line[2:]}")


def open_sample_pull_requests(
    stack: Any, prepare: Callable[[SampleRepo], None] | None = None
) -> tuple[SampleRepo, dict[str, int]]:
    """Create the sample repository on the emulated GitHub and open its two pull requests. ``stack`` is anything
    with ``root``, ``emulator``, ``webhook_secret`` and ``web_url``; ``prepare`` runs on the repository first."""
    repo = create_sample_repo(stack.root / "repos" / FULL_NAME)
    write_sample_index(stack.root / "index")
    if prepare is not None:
        prepare(repo)
    stack.emulator.add_repo(FULL_NAME)
    stack.emulator.add_installation(INSTALLATION_ID, repos=[FULL_NAME])
    pulls = {repo.good_sha: 1, repo.buggy_sha: 2}
    for number, sha, branch in ((1, repo.good_sha, "add-residual-norm"), (2, repo.buggy_sha, "add-counting-scale")):
        stack.emulator.add_pull(FULL_NAME, number, sha, branch, "main", "octocat", "OWNER")
        payload = pull_request_event(
            "opened", full_name=FULL_NAME, repo_id=REPO_ID, clone_url=f"https://github.com/{FULL_NAME}.git",
            installation_id=INSTALLATION_ID, number=number, head_sha=sha, head_ref=branch, base_sha=repo.base_sha,
        )
        status, answer = post_webhook(stack, "pull_request", payload)
        print(f"  POST /webhook pull_request.opened PR #{number} -> {status} {answer.get('messages')}", flush=True)
    return repo, pulls


def _title(run: dict[str, Any]) -> str:
    return str((run.get("output") or {}).get("title") or "")


def wait_for_check_runs(stack: Stack, count: int, timeout_s: float, progress: Progress | None = None,
                        repos: tuple[str, ...] = (FULL_NAME,), final: bool = True) -> list[dict[str, Any]]:
    """`final`: also until no run waits for its base's verdict (the sandbox shows final words; a test of the jobs
    themselves need not wait for the base run)."""
    def every_run() -> list[dict[str, Any]]:
        return [run for name in repos for run in stack.emulator.check_runs(name)]

    def all_completed() -> bool:
        stack.check_alive()
        runs = every_run()
        if progress is not None:
            progress.show(runs)
        # A run judged while its base still ran is rewritten when the base finishes: that is its final word.
        return len(runs) >= count and all(r["status"] == "completed" and not (final and _title(r).endswith(
            BASE_PENDING)) for r in runs)

    wait_until(all_completed, timeout_s, "the check runs to complete")
    return every_run()


def settled(stack: Stack, store: Store, repos: tuple[str, ...]) -> bool:
    """Nothing left to change what the sandbox prints: no run planning, no job queued or running (base runs
    included), every job's last word reported, every comment past its base's wait."""
    if store.runs_in_state("planning") or store.jobs_in_state("queued", "running"):
        return False
    if any(job.reported != "completed" for run in store.recent_runs(200) if run.trigger not in INTERNAL_TRIGGERS
           for job in store.jobs_of(run.id)):
        return False
    return not any(PENDING_NOTE in str(comment.get("body") or "") for comment in stack.emulator.comments
                   if comment.get("repository") in repos)


def wait_until_settled(stack: Stack, store: Store, repos: tuple[str, ...], timeout_s: float,
                       progress: Progress | None = None) -> None:
    """Until every check run, base run and comment has its final word (what the final printout shows)."""
    def done() -> bool:
        stack.check_alive()
        if progress is not None:
            progress.show([run for name in repos for run in stack.emulator.check_runs(name)])
        try:
            return settled(stack, store, repos)
        except Exception:  # noqa: BLE001 - a read that raced a worker's write: asked again at the next poll
            return False

    wait_until(done, timeout_s, "every check run, base run and comment to settle")


def run_sandbox(root: Path | None = None, keep_running: bool = False, timeout_s: float = 900.0,
                devices: str = "cpu", cuda_workers: int = 1, declared: bool = False) -> int:
    """`devices`: what this sandbox has workers for ("cpu" or "cpu,cuda"; cuda needs a GPU host). `declared`: also
    the declared-targets sample through all six suites, on cuda when the sandbox has it. A directory it made itself
    is removed at the end, unless something went wrong (then its processes' logs are what to read)."""
    made = root is None
    root = root or Path(tempfile.mkdtemp(prefix="compile-ci-sandbox-"))
    outcome = "crashed"
    try:
        ok = _sandbox(root, keep_running, timeout_s, devices, cuda_workers, declared)
        outcome = "ok" if ok else "unexpected"
        return 0 if ok else 1
    except (KeyboardInterrupt, SystemExit):
        outcome = "stopped"
        raise
    finally:
        if made:
            _tidy(root, keep=outcome in ("crashed", "unexpected"))
        elif outcome != "stopped":
            print(f"Logs of every process are in {root}.")


def _tidy(root: Path, keep: bool) -> None:
    if keep:
        print(f"Kept {root}: the logs of every process are there (remove it when done).", flush=True)
        return
    shutil.rmtree(root, ignore_errors=True)
    if root.exists():  # files a runner's user wrote (a job container's cache) that this user may not remove
        print(f"Could not remove all of {root} (files of another user): remove it with sudo.", flush=True)
    else:
        print(f"Removed {root}.", flush=True)


def _sandbox(root: Path, keep_running: bool, timeout_s: float, devices: str, cuda_workers: int,
             declared: bool) -> bool:
    started = time.monotonic()
    has_cuda = "cuda" in devices.split(",")
    print(f"compile-ci sandbox in {root}", flush=True)
    with Stack(root, devices=devices, cuda_workers=cuda_workers) as stack:
        print(f"  web service  {stack.web_url}\n  GitHub emulator  {stack.emulator.url}\n  redis  {stack.redis_url}")
        jobs_started = time.monotonic()  # set-up done: what follows is the pull requests' jobs
        repo, pulls = open_sample_pull_requests(stack)
        declared_device = "cuda" if has_cuda else "cpu"
        declared_repo = open_declared_pull_request(stack, declared_device, post_webhook) if declared else None
        if declared_repo is not None:
            pulls[declared_repo.head_sha] = 3
        repos = (FULL_NAME, DECLARED_NAME) if declared else (FULL_NAME,)
        print("\nWhere to look, while it runs" + (" (and after: --keep-running)" if keep_running else
                                                   " (--keep-running keeps them up after)") + ":")
        print("\n".join(where_to_look(stack.web_url, stack.emulator.url, repos)))
        print("\nCheck runs as they change, and the base runs the comparison needs (no check run of their own):",
              flush=True)
        expected = CHECK_RUNS + (len(DECLARED_SUITES) if declared else 0)
        store = Store(stack.env()["COMPILE_CI_DATABASE_URL"])
        progress = Progress(pulls, started, store)
        wait_for_check_runs(stack, expected, timeout_s, progress, repos)
        wait_until_settled(stack, store, repos, timeout_s, progress)
        jobs_s = time.monotonic() - jobs_started
        check_runs = [run for name in repos for run in stack.emulator.check_runs(name)]
        print("\nCheck runs on GitHub (emulated):")
        print_check_runs(check_runs, pulls)
        ok = _as_expected(check_runs, repo.good_sha, repo.buggy_sha, ("cpu", "cuda") if has_cuda else ("cpu",))
        if declared_repo is not None:
            ok = ok and _declared_as_expected(check_runs, declared_repo.head_sha, declared_device)
        ok = ok and not stack.emulator.errors
        for error in stack.emulator.errors:
            print(f"  emulator error: {error}")
        for device in ("cpu", "cuda") if has_cuda else ("cpu",):
            code = generated_code_summary(stack.root / "data" / "artifacts", device)
            print(f"  generated code ({device}): " + ", ".join(f"{k} {v}" for k, v in code.items()))
            if device == "cuda" or declared:
                for line in save_pages(stack.web_url, check_runs, device, stack.root / "pages"):
                    print(f"  {line}")
        comments = [line for name in repos for line in comments_of(stack.emulator.comments, name)]
        if comments:
            print("\nThe pull requests' comments (as GitHub would render this markdown):\n" + "\n".join(comments))
        what = "PR #1 passes (suites, own tests), PR #2 fails on its buggy model"
        if has_cuda:
            what += ", on cpu and on cuda"
        if declared_repo is not None:
            what += f"; the declared targets pass all six suites on {declared_device}"
        print(f"\n{'OK' if ok else 'UNEXPECTED'}: {what}.\nJobs: {jobs_s:.0f} s, from the first webhook until every "
              f"check run, base run and comment had its final word ({time.monotonic() - started:.0f} s with the "
              f"stack's start).", flush=True)
        if keep_running:
            print(f"Browse {stack.web_url}/ ; Ctrl-C (or SIGTERM, SIGHUP) stops everything.", flush=True)
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                pass
    return ok


def _as_expected(check_runs: list[dict[str, Any]], good_sha: str, buggy_sha: str,
                 devices: tuple[str, ...] = ("cpu",)) -> bool:
    for device in devices:
        suite = {r["head_sha"]: r for r in check_runs if r["name"] == f"correctness ({device})"}
        own = {r["head_sha"]: r for r in check_runs if r["name"] == f"repo ({device})"}
        if not (
            suite.get(good_sha, {}).get("conclusion") == "success"
            and own.get(good_sha, {}).get("conclusion") == "success"  # its own tests import it and its dependency
            and suite.get(buggy_sha, {}).get("conclusion") == "failure"
            and "counting_scale" in (suite[buggy_sha]["output"].get("summary") or "")
        ):
            return False
    return True


def _declared_as_expected(check_runs: list[dict[str, Any]], head_sha: str, device: str) -> bool:
    mine = {r["name"]: r for r in check_runs if r["head_sha"] == head_sha}
    return all(mine.get(f"{suite} ({device})", {}).get("conclusion") == "success" for suite in DECLARED_SUITES)
