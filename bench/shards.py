"""A model repository's suite job on 1, 2 and 4 cpu workers (sharding), and what running only what a pull request can
affect saves.

The repository: declared models in one module each (zoo/<name>.py, real architectures from compile-ci's own corpus,
suites/correctness/breadth_models.py, as a stand-in for a zoo of torchvision/timm/transformers classes), and
zoo/patches.py, which a compiler patch would live in. Through a private Redis, the GitHub emulator, embedded Celery
worker (W threads for the cpu queue's shards, one for reports) and LocalRunner, with the built-in suite:

1. an unmeasured push that fills the trusted compile cache and records each test's duration;
2. for W in --workers: a push of a new commit on W cpu worker slots (COMPILE_CI_MAX_SHARDS=W, no minimum seconds
   per shard): the job's wall time, its shards' own times and each shard's overhead (its wall time minus the time
   of the tests it ran: a pytest, a torch import, the collection, the plugin);
3. two pull requests on one worker, against the last push: one that changes one model's module (only that model's
   tests run; the others take the base's results) and one that changes zoo/patches.py (everything runs).

`--targets PATH` runs a declared-targets repository instead of the stand-in, e.g. tests/suites/models_repo (real
torchvision, timm and transformers classes; its [install] requirements come through the install phase as a job's do):
its files and its config's [install] and [targets], with [suites] set to this bench's suite on cpu. The first pull
request changes the module of its first declared target, the second a patches module the bench adds beside it.

Run from the repository root as a module: `python -m bench.shards [--models 6] [--suite correctness] [--workers 1,2,4]
[--targets tests/suites/models_repo]`.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import json
import shutil
import subprocess
import tempfile
import time
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path

from celery.contrib.testing.worker import start_worker

from bench.base_compare import ROOT, settings_for
from service.celery_app import slots_by_queue
from service.config import Settings
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.sandbox.deliveries import pull_request_event, push_event, signed
from service.devkit.sandbox.sample_repo import commit_file
from service.devkit.sandbox.stack import APP_ID, INSTALLATION_ID, app_keypair, free_port, wait_for_port
from service.jobs.tasks import create_worker_celery
from service.store import Job, Store
from service.store.shards import shards_of
from service.web.app import create_app

FULL_NAME = "bench/model-zoo"
# name -> (class in suites/correctness/breadth_models.py, its example inputs)
MODELS = {
    "resnet_block": ("ResNetBlock", "(torch.randn(4, 3, 8, 8),)"),
    "unet_block": ("UNetBlock", "(torch.randn(2, 2, 8, 8),)"),
    "transformer_kv_cache": ("TransformerWithKVCache",
                             "(torch.randn(2, 2, 8), torch.randn(2, 2, 5, 4), torch.randn(2, 2, 5, 4))"),
    "recurrent_cells": ("RecurrentCells", "(torch.randn(2, 3, 3),)"),
    "mixture_of_experts": ("MixtureOfExperts", "(torch.randn(5, 6) * 2,)"),
    "graph_convolution": ("GraphConvolution", "(torch.randn(5, 4), torch.tensor([[0, 2, 3, 4, 0, 1, 3, 2, 4], "
                                              "[1, 1, 1, 0, 2, 3, 2, 0, 3]]))"),
}
HEADER = "import math\n\nimport torch\nimport torch.nn.functional as F\nfrom torch import nn\n\n\n"
PATCH = "from torch._inductor import lowering  # a patch lives here ({})\n"  # the compiler surface: everything runs
CONFIG_NAMES = (".compile-ci.toml", "compile-ci.toml")


def model_modules(count: int) -> dict[str, str]:
    """zoo/<name>.py for the first `count` models: the class's source and an examples() that declares it."""
    source = (ROOT / "suites" / "correctness" / "breadth_models.py").read_text()
    classes = {node.name: ast.get_source_segment(source, node) for node in ast.parse(source).body
               if isinstance(node, ast.ClassDef)}
    files = {}
    for name, (cls, inputs) in list(MODELS.items())[:count]:
        files[f"zoo/{name}.py"] = (f'"""{cls}: one model of the zoo."""\n\n{HEADER}{classes[cls]}\n\n\n'
                                   f"def examples():\n    return [({name!r}, {cls}, {inputs})]\n")
    return files


@dataclasses.dataclass(frozen=True)
class Repository:
    files: dict[str, str]  # path -> text, committed one by one before the config
    config: str  # .compile-ci.toml
    model: str  # the module of one declared target: the first pull request changes it
    patches: str  # a module holding a compiler patch: the second pull request changes it


def stand_in_repository(count: int, suite: str) -> Repository:
    modules = model_modules(count)
    specs = ", ".join(f'"zoo.{Path(p).stem}:examples"' for p in modules)
    config = (f'[suites]\ndevices = ["cpu"]\nrun = ["{suite}"]\nflaky_reruns = 0\n'
              f"[targets]\nmodels = [{specs}]\n")
    return Repository({"zoo/__init__.py": "", **modules}, config, next(iter(modules)), "zoo/patches.py")


def declared_repository(path: Path, suite: str) -> Repository:
    """A repository with [targets] (its config named .compile-ci.toml or compile-ci.toml), its [suites] replaced."""
    config_file = next((path / name for name in CONFIG_NAMES if (path / name).is_file()), None)
    if config_file is None:
        raise SystemExit(f"--targets {path}: no {' or '.join(CONFIG_NAMES)} there")
    config = tomllib.loads(config_file.read_text())
    config["suites"] = {**config.get("suites", {}), "devices": ["cpu"], "run": [suite], "flaky_reruns": 0}
    files = {f.relative_to(path).as_posix(): f.read_text() for f in sorted(path.rglob("*"))
             if f.is_file() and "__pycache__" not in f.parts and f != config_file}
    specs = [spec for kind in ("models", "fuse") for spec in config.get("targets", {}).get(kind, [])]
    if not specs:
        raise SystemExit(f"--targets {path}: its config declares no [targets] models or fuse")
    stem = specs[0].split(":", 1)[0].replace(".", "/")
    model = next((m for m in (f"{stem}.py", f"{stem}/__init__.py") if m in files), None)
    if model is None:
        raise SystemExit(f"--targets {path}: the module of {specs[0]!r} is not in it")
    return Repository(files, toml_text(config), model, str(Path(model).parent / "compile_ci_bench_patches.py"))


def toml_text(config: dict[str, object]) -> str:
    """A config's tables of strings, numbers, booleans and lists of them as TOML (JSON's literals are TOML's)."""
    lines = []
    for table, values in config.items():
        if not isinstance(values, dict) or any(isinstance(v, dict) for v in values.values()):
            raise SystemExit(f"--targets: only tables of plain values are supported, not [{table}] as it is")
        lines += [f"[{table}]", *(f"{key} = {json.dumps(value)}" for key, value in values.items())]
    return "\n".join(lines) + "\n"


class Zoo:
    def __init__(self, settings: Settings, emulator: GitHubEmulator, repo: Path) -> None:
        self.settings, self.emulator, self.repo = settings, emulator, repo
        self.store = Store(settings.database_url)
        self.number = 0

    def deliver(self, settings: Settings, event: str, payload: dict[str, object]) -> None:
        headers, body = signed("bench-secret", event, payload)
        assert create_app(settings).test_client().post("/webhook", data=body, headers=headers).status_code == 202

    def push(self, settings: Settings, note: str) -> Job:
        sha = commit_file(self.repo, "main", "notes.md", note + "\n", note)
        self.deliver(settings, "push", push_event(
            full_name=FULL_NAME, repo_id=4200, installation_id=INSTALLATION_ID,
            clone_url=f"https://github.com/{FULL_NAME}.git", branch="main", before="0" * 40, after=sha))
        return self.finished(sha)

    def pull_request(self, settings: Settings, path: str, text: str) -> Job:
        self.number += 1
        base = subprocess.run(["git", "-C", str(self.repo), "rev-parse", "main"], check=True, capture_output=True,
                              text=True).stdout.strip()
        sha = commit_file(self.repo, f"pr{self.number}", path, text, f"change {path}")
        self.deliver(settings, "pull_request", pull_request_event(
            "opened", full_name=FULL_NAME, repo_id=4200, installation_id=INSTALLATION_ID,
            clone_url=f"https://github.com/{FULL_NAME}.git", number=self.number, head_sha=sha,
            head_ref=f"pr{self.number}", base_sha=base))
        return self.finished(sha)

    def finished(self, sha: str) -> Job:
        while True:
            runs = [r for r in self.emulator.check_runs(FULL_NAME) if r["head_sha"] == sha]
            if runs and all(r["status"] == "completed" for r in runs):
                break
            time.sleep(0.5)
        (run,) = self.store.runs_at_sha(FULL_NAME, sha)
        (job,) = self.store.jobs_of(run.id)
        return job


@contextlib.contextmanager
def worker(settings: Settings, shards: int) -> Iterator[Settings]:
    """One worker for both queues, with a thread per shard and one for reports: COMPILE_CI_MAX_SHARDS keeps the
    reports' thread out of the split. (Two embedded workers in one process do not survive one of them stopping.)"""
    sized = dataclasses.replace(settings, max_shards=shards)
    app = create_worker_celery(sized, suites_dir=ROOT / "suites")
    with start_worker(app, pool="threads", concurrency=shards + 1, perform_ping_check=False, shutdown_timeout=120,
                      queues=["cpu", "github"], hostname=f"bench-{uuid.uuid4().hex[:8]}@bench"):
        while slots_by_queue(app, timeout=2.0).get("cpu", 0) < shards + 1:
            time.sleep(0.2)
        yield sized


def describe(zoo: Zoo, job: Job) -> str:
    results = [r for r in zoo.store.results_of(job.id, job.attempt) if not r.not_affected]
    line = f"job wall {job.duration_s:.1f} s, {len(results)} tests run ({job.title})"
    shards = shards_of(zoo.store, job.id, job.attempt)
    for shard in shards:
        tests = [r for r in results if r.shard == shard.index]
        busy = sum(r.duration_s for r in tests)
        line += (f"\n    shard {shard.index + 1}/{len(shards)}: {shard.duration_s:.1f} s, {len(tests)} tests "
                 f"taking {busy:.1f} s, overhead {shard.duration_s - busy:.1f} s")
    if not shards:
        line += f"\n    whole: tests take {sum(r.duration_s for r in results):.1f} s"
    return line


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--suite", default="correctness")
    parser.add_argument("--models", type=int, default=6)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--targets", type=Path, default=None, metavar="PATH",
                        help="a declared-targets repository instead of the stand-in models (e.g. "
                             "tests/suites/models_repo); --models then does not apply")
    args = parser.parse_args()
    declared = (declared_repository(args.targets, args.suite) if args.targets
                else stand_in_repository(args.models, args.suite))
    root = Path(tempfile.mkdtemp(prefix="compile-ci-bench-shards-"))
    port = free_port()
    redis = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                              "--appendonly", "no", "--dir", str(root)], stdout=subprocess.DEVNULL)
    try:
        wait_for_port(port, redis, "redis-server")
        private_key, public_key = app_keypair()
        with GitHubEmulator(app_id=APP_ID, public_key_pem=public_key) as emulator:
            emulator.add_repo(FULL_NAME)
            emulator.add_installation(INSTALLATION_ID, repos=[FULL_NAME])
            base = settings_for(root, f"redis://127.0.0.1:{port}/0", emulator.url, private_key)
            settings = dataclasses.replace(base, shard_min_seconds=0)
            repo = root / "repos" / FULL_NAME
            repo.mkdir(parents=True)
            subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
            for path, text in declared.files.items():
                commit_file(repo, "main", path, text, f"add {path}")
            commit_file(repo, "main", declared.patches, PATCH.format("v1"), "patches")
            commit_file(repo, "main", ".compile-ci.toml", declared.config, "declare the zoo")
            zoo = Zoo(settings, emulator, repo)
            with worker(settings, 1) as one:
                warm = zoo.push(one, "warm-up")
            print(f"warm-up push (fills the compile cache, records durations): {describe(zoo, warm)}", flush=True)
            walls = {}
            for workers in (int(w) for w in args.workers.split(",")):
                with worker(settings, workers) as sized:
                    job = zoo.push(sized, f"on {workers} workers")
                walls[workers] = job.duration_s or 0.0
                print(f"{workers} cpu worker(s), {job.shards} shard(s): {describe(zoo, job)}", flush=True)
            first = next(iter(walls.values()))
            print("speed-up: " + ", ".join(f"{w} workers {first / wall:.2f}x" for w, wall in walls.items()))
            with worker(settings, 1) as one:
                name = declared.model
                model = zoo.pull_request(one, name, declared.files[name] + "\n# a comment\n")
                print(f"pull request changing {name} (1 worker): {describe(zoo, model)}", flush=True)
                patch = zoo.pull_request(one, declared.patches, PATCH.format("v2"))
                print(f"pull request changing {declared.patches} (1 worker): {describe(zoo, patch)}", flush=True)
            left = len([r for r in zoo.store.results_of(model.id, model.attempt) if r.not_affected])
            ratio = (model.duration_s or 0) / (patch.duration_s or 1)
            print(f"affected targets only: {model.duration_s:.1f} s against {patch.duration_s:.1f} s "
                  f"({ratio:.2f}x; {left} tests took the base's result)")
            assert emulator.errors == [], emulator.errors
        return 0
    finally:
        redis.terminate()
        redis.wait(timeout=10)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
