"""What a pull request costs by what it changes: tests run, tests reused, wall time, for four pull requests.

For a sample repository (the sandbox's model zoo, or a declared-targets repository such as tests/suites/models_repo),
through a private Redis, the GitHub emulator, an embedded Celery worker (one cpu slot, one for reports) and
LocalRunner, with compile-ci's own suites:

1. a push of the default branch (the base every pull request below is judged against; it fills the compile cache);
2. four pull requests against it, one at a time, each until every check run of its head and every base run it asked
   for has its last word:
     README-only      README.md changed
     one-model        the module of the first declared target changed (the sandbox's: a model added to it)
     config-key       a new module, declared as one more `[targets] models` entry in .compile-ci.toml
     compiler-patch   a module beside the models that replaces an inductor lowering, imported by them

Per pull request: the tests its jobs ran, the tests they reused (compile-ci leaves out what a change cannot reach,
issue 40; "0" before that), its wall time from the webhook, and the runner time of its jobs and of any base run it
needed. It uses only what compile-ci had before reuse existed (the store's `not_affected` rows), so the same file
measures an older checkout: copy it there and run it with that checkout first on PYTHONPATH.

Run from the repository root as a module:
  python -m bench.pr_cost                                    # the sandbox's sample repository, on cpu
  python -m bench.pr_cost --targets tests/suites/models_repo  # real models: torchvision, timm, transformers as
                                                              # installed beside torch (its [install] is dropped)
  [--suites correctness,repo] [--device cuda] [--only README-only,one-model]
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

from celery.contrib.testing.worker import start_worker
from celery.signals import task_postrun, task_prerun

from bench.base_compare import ROOT, settings_for
from bench.private_stack import private_stack
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.sandbox.deliveries import pull_request_event, push_event, signed
from service.devkit.sandbox.sample_index import write_sample_index
from service.devkit.sandbox.sample_repo import CONFIG, GOOD_MODEL, commit_file, create_sample_repo
from service.devkit.sandbox.stack import INSTALLATION_ID
from service.jobs.tasks import create_worker_celery
from service.store import Store
from service.web.app import create_app

FULL_NAME = "bench/pr-cost"
REPO_ID = 4300
EXTRA_MODEL = '''"""One more model, declared in .compile-ci.toml by the config-key pull request."""

import torch
from torch import nn


def examples():
    return [("extra_mlp", lambda: nn.Sequential(nn.Linear(8, 8), nn.ReLU()), (torch.randn(2, 8),))]
'''
PATCH = '''"""The repository's compiler patch: inductor lowers aten.relu through this module."""

import torch
from torch._inductor import lowering

_stock = lowering.lowerings[torch.ops.aten.relu.default]


def _relu(*args, **kwargs):
    return _stock(*args, **kwargs)


lowering.lowerings[torch.ops.aten.relu.default] = _relu
'''


@dataclasses.dataclass(frozen=True)
class Sample:
    repo: Path
    config: str  # .compile-ci.toml as the default branch has it
    model: str  # the module of the first declared target
    model_change: str  # its text after the one-model pull request
    package: str  # where the config-key and compiler-patch pull requests add a module


def sandbox_sample(root: Path, suites: list[str], device: str) -> Sample:
    repo = create_sample_repo(root / "repos" / FULL_NAME).path
    config = _suites(CONFIG, suites, device)
    commit_file(repo, "main", ".compile-ci.toml", config, "bench: suites and device")
    zoo = (repo / "samplezoo" / "zoo.py").read_text()
    return Sample(repo, config, "samplezoo/zoo.py", zoo + GOOD_MODEL, "samplezoo")


def targets_sample(root: Path, source: Path, suites: list[str], device: str) -> Sample:
    """A declared-targets repository with its own [targets]; its [install] dropped: the host's installed packages
    (torchvision, timm, transformers beside torch) are what its models import, as on the GPU host."""
    config_file = next(p for p in (source / ".compile-ci.toml", source / "compile-ci.toml") if p.is_file())
    declared = tomllib.loads(config_file.read_text()).get("targets", {})
    specs = [spec for kind in ("models", "fuse") for spec in declared.get(kind, [])]
    lines = ["[install]", "package = false", "[targets]",
             *(f"{kind} = {list(values)!r}".replace("'", '"') for kind, values in declared.items())]
    config = _suites("\n".join(lines) + "\n", suites, device)
    repo = root / "repos" / FULL_NAME
    repo.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    for path in sorted(p for p in source.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        if path != config_file:
            commit_file(repo, "main", path.relative_to(source).as_posix(), path.read_text(), f"add {path.name}")
    commit_file(repo, "main", ".compile-ci.toml", config, "declare the zoo")
    model = specs[0].split(":", 1)[0].replace(".", "/") + ".py"
    text = (repo / model).read_text()
    return Sample(repo, config, model, text + "\n# a comment: the module changed\n", str(Path(model).parent))


def _suites(config: str, suites: list[str], device: str) -> str:
    """The config with its [suites] table replaced: these suites on this device."""
    kept, skipping = [], False
    for line in config.splitlines():
        if line.startswith("["):
            skipping = line.strip() == "[suites]"
        if not skipping:
            kept.append(line)
    repo_tests = '\nrepo_tests = ["tests"]' if "repo" in suites else ""
    return ("\n".join(kept).rstrip() + f'\n[suites]\nrun = {suites!r}\ndevices = ["{device}"]\nflaky_reruns = 0'
            f"{repo_tests}\n").replace("'", '"')


def pull_requests(sample: Sample) -> dict[str, list[tuple[str, str]]]:
    """Each pull request's files (path, text), committed in order on its branch."""
    extra = f"{sample.package}/compile_ci_extra.py"
    extra_spec = extra.removesuffix(".py").replace("/", ".") + ":examples"
    config = sample.config.replace("models = [", f'models = ["{extra_spec}", ', 1)
    patch = f"{sample.package}/compile_ci_patch.py"
    imported = f"import {patch.removesuffix('.py').replace('/', '.')}  # noqa: F401 - the patch\n"
    return {"README-only": [("README.md", "# The model zoo\n\nDocumented at last.\n")],
            "one-model": [(sample.model, sample.model_change)],
            "config-key": [(extra, EXTRA_MODEL), (".compile-ci.toml", config)],
            "compiler-patch": [(patch, PATCH), (sample.model, imported + (sample.repo / sample.model).read_text())]}


class Measure:
    def __init__(self, settings: object, emulator: GitHubEmulator, repo: Path) -> None:
        self.settings, self.emulator, self.repo = settings, emulator, repo
        self.store = Store(settings.database_url)  # type: ignore[attr-defined]
        self.number = 0
        self.titles: list[str] = []
        # The embedded worker's tasks in flight: a report's last step (the pull request's comment) comes after the
        # job is marked reported, and the emulator must not stop under it.
        self.busy: set[str] = set()
        task_prerun.connect(lambda task_id=None, **_: self.busy.add(str(task_id)), weak=False)
        task_postrun.connect(lambda task_id=None, **_: self.busy.discard(str(task_id)), weak=False)

    def deliver(self, event: str, payload: dict[str, object]) -> None:
        headers, body = signed("bench-secret", event, payload)
        assert create_app(self.settings).test_client().post("/webhook", data=body, headers=headers).status_code == 202

    def settle(self, timeout_s: float = 7200) -> None:
        """Until no run plans, no job waits or runs (base runs included), every job's last word is reported and no
        task of the worker is still at work (a comment being posted)."""
        deadline = time.monotonic() + timeout_s
        while (self.busy or self.store.runs_in_state("planning") or self.store.jobs_in_state("queued", "running")
               or any(j.reported != "completed" for r in self.store.recent_runs(500) if r.trigger in
                      ("push", "pull_request") for j in self.store.jobs_of(r.id))):
            assert time.monotonic() < deadline, "the jobs never settled"
            time.sleep(0.5)

    def push(self, sha: str) -> float:
        started = time.monotonic()
        self.deliver("push", push_event(full_name=FULL_NAME, repo_id=REPO_ID, installation_id=INSTALLATION_ID,
                                        clone_url=f"https://github.com/{FULL_NAME}.git", branch="main",
                                        before="0" * 40, after=sha))
        self.settle()
        (run,) = self.store.runs_at_sha(FULL_NAME, sha)
        self.titles = [f"{j.suite}: {j.title}" for j in self.store.jobs_of(run.id) if j.conclusion != "neutral"]
        return time.monotonic() - started

    def pull_request(self, base: str, files: list[tuple[str, str]]) -> dict[str, float]:
        self.number += 1
        branch = f"pr{self.number}"
        subprocess.run(["git", "-C", str(self.repo), "branch", "-q", branch, base], check=True)
        for path, text in files:
            sha = commit_file(self.repo, branch, path, text, f"change {path}")
        bases_before = {r.id for r in self.store.recent_runs(500) if r.trigger == "base"}
        started = time.monotonic()
        self.deliver("pull_request", pull_request_event(
            "opened", full_name=FULL_NAME, repo_id=REPO_ID, installation_id=INSTALLATION_ID,
            clone_url=f"https://github.com/{FULL_NAME}.git", number=self.number, head_sha=sha, head_ref=branch,
            base_sha=base))
        self.settle()
        wall = time.monotonic() - started
        (run,) = self.store.runs_at_sha(FULL_NAME, sha)
        rows = [r for job in self.store.jobs_of(run.id) for r in self.store.results_of(job.id, job.attempt)]
        bases = [r for r in self.store.recent_runs(500) if r.trigger == "base" and r.id not in bases_before]
        self.titles = [f"{j.suite}: {j.verdict_title or j.title}" for j in self.store.jobs_of(run.id)
                       if j.conclusion != "neutral"]
        return {"run": sum(not r.not_affected for r in rows), "reused": sum(bool(r.not_affected) for r in rows),
                "wall": wall, "jobs": sum(j.duration_s or 0.0 for j in self.store.jobs_of(run.id)),
                "base": sum(j.duration_s or 0.0 for b in bases for j in self.store.jobs_of(b.id))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", type=Path, default=None, metavar="PATH",
                        help="a declared-targets repository instead of the sandbox's sample")
    parser.add_argument("--suites", default="", help="comma-separated (default: correctness,repo for the sandbox's "
                                                     "sample, correctness for --targets)")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--only", default="", help="comma-separated pull request names (default: all four)")
    args = parser.parse_args()
    logging.getLogger("service").setLevel(logging.WARNING)  # the table, not every delivery
    suites = [s for s in (args.suites or ("correctness" if args.targets else "correctness,repo")).split(",") if s]
    root = Path(tempfile.mkdtemp(prefix="compile-ci-bench-pr-cost-"))
    with private_stack(root, FULL_NAME, INSTALLATION_ID) as (redis_url, emulator, private_key):
        index = write_sample_index(root / "index")
        # One cpu slot, one job at a time (no shards), as the sandbox's worker; the job's interpreter keeps the
        # path the install step gives it (the repository's dependencies) after this checkout's `suites`.
        python = root / "job-python"
        python.write_text(f'#!/bin/sh\nPYTHONPATH={ROOT}${{PYTHONPATH:+:$PYTHONPATH}} exec {sys.executable} "$@"\n')
        python.chmod(0o755)
        settings = dataclasses.replace(settings_for(root, redis_url, emulator.url,
                                                    private_key), pip_index_url=index,
                                       devices=(args.device,), max_shards=1, runner_python=str(python))
        sample = (targets_sample(root, args.targets, suites, args.device) if args.targets
                  else sandbox_sample(root, suites, args.device))
        base = subprocess.run(["git", "-C", str(sample.repo), "rev-parse", "main"], check=True,
                              capture_output=True, text=True).stdout.strip()
        app = create_worker_celery(settings, suites_dir=ROOT / "suites")
        queues = [args.device, "github"]
        with start_worker(app, pool="threads", concurrency=2, perform_ping_check=False, shutdown_timeout=120,
                          queues=queues):
            measure = Measure(settings, emulator, sample.repo)
            print(f"{'sample':<16} {ROOT.name} at {_head(ROOT)}; suites {','.join(suites)} on {args.device}; "
                  f"{os.cpu_count()} cpus", flush=True)
            print(f"{'push (the base)':<16} {measure.push(base):7.1f} s wall  ({'; '.join(measure.titles)})",
                  flush=True)
            print(f"{'pull request':<16} {'tests run':>9} {'reused':>7} {'wall':>8} {'its jobs':>9} "
                  f"{'base run':>9}", flush=True)
            chosen = [n for n in args.only.split(",") if n] or list(pull_requests(sample))
            for name, files in pull_requests(sample).items():
                if name in chosen:
                    row = measure.pull_request(base, files)
                    print(f"{name:<16} {row['run']:>9.0f} {row['reused']:>7.0f} {row['wall']:>6.1f} s "
                          f"{row['jobs']:>7.1f} s {row['base']:>7.1f} s  ({'; '.join(measure.titles)})", flush=True)
        assert emulator.errors == [], emulator.errors
    return 0


def _head(path: Path) -> str:
    found = subprocess.run(["git", "-C", str(path), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return found.stdout.strip() or "?"

if __name__ == "__main__":
    raise SystemExit(main())
