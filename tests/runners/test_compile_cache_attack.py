"""Replays the cache-poisoning attack (issue 10) against the real DockerRunner and image, and against LocalRunner.

A trusted job of repository A fills its cache with a real torch.compile. An approved untrusted pull request of A
then starts warm from that cache, appends a payload to every cached .py module and drops a marker; in its own job
the payload runs (so the attack is real and the test can fail). Later jobs (A trusted, another pull request of A,
repository B) compile the same function through torch's cache loader: none runs the payload or sees the marker,
A's trusted jobs still hit the cache, and B never sees any of A's files.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from runners.compile_cache import TRUSTED, UNTRUSTED, CacheScope, RepoCache
from runners.docker_runner import RUNNER_UID, DockerRunner
from runners.protocol import Runner, RunSpec

JOB = r'''
import json, os, pathlib, subprocess, sys
cache = pathlib.Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]).parent
out = pathlib.Path(os.environ["OUT"])
forbidden = json.loads(os.environ.get("FORBIDDEN", "[]"))
COMPILE = """
import json, sys, torch
from torch._dynamo.utils import counters
f = torch.compile(lambda x: (x * 3 + 1).sin() * 2, backend="inductor")
f(torch.ones(8))
json.dump({k: dict(v) for k, v in counters.items()}, open(sys.argv[1], "w"))
"""
PAYLOAD = "\nimport os as _o\nopen(_o.path.join(_o.environ['OUT'], 'PWNED'), 'w').write('ran')\n"

def compile_once(name):
    subprocess.run([sys.executable, "-c", COMPILE, str(out / name)], check=True)
    return json.loads((out / name).read_text())

def files():
    return sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file())

report = {"files_before": files()}
if forbidden:
    # Another repository's cached file names, looked for everywhere this job can see (before it compiles).
    names = set(forbidden)
    skip = ("/proc", "/sys", "/dev")
    report["forbidden_seen"] = [str(path) for top in pathlib.Path("/").iterdir() if str(top) not in skip
                                for path in top.rglob("*") if path.name in names]
report["marker_before"] = any(p.name == "MARKER" for p in cache.rglob("*"))
report["py_with_payload"] = sum(PAYLOAD in p.read_text() for p in cache.rglob("*.py"))
report["first"] = compile_once("first.json")
if sys.argv[1] == "attack":
    for module in cache.rglob("*.py"):
        with open(module, "a") as handle:
            handle.write(PAYLOAD)
    (cache / "MARKER").write_text("untrusted")
    (cache / "inductor" / "MARKER").write_text("untrusted")
    report["poisoned"] = compile_once("poisoned.json")
report["pwned"] = (out / "PWNED").exists()
json.dump(report, open(out / "report.json", "w"))
'''


def fx_hits(counters: dict[str, dict[str, int]]) -> int:
    return counters.get("inductor", {}).get("fxgraph_cache_hit", 0)


def tree_digest(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def job_runner(runner: Runner, tmp_path: Path) -> Callable[..., dict]:
    root = tmp_path / "cache"
    counter = iter(range(100))

    def run(repo: str, trust: str, pr: int | None, mode: str = "compile", forbidden: list[str] | None = None,
            ) -> dict:
        n = next(counter)
        out = tmp_path / f"out-{n}"
        scope = CacheScope(root, repo, trust, pr)
        env = {"OUT": str(out), "FORBIDDEN": json.dumps(forbidden or [])}
        spec = RunSpec(job_id=f"attack-{n}", command=(runner.python, "-c", JOB, mode), checkout_dir=tmp_path,
                       output_dir=out, timeout_s=300, env=env, cache=scope, memory_mb=4096)
        result = runner.run(spec)
        assert result.exit_code == 0, (spec.log_path.read_text(), result)
        return json.loads((out / "report.json").read_text())

    return run


SEEDED = "precompiled_headers/"


def test_an_untrusted_pull_request_cannot_poison_or_read_across(runner: Runner, tmp_path: Path) -> None:
    run = job_runner(runner, tmp_path)
    trusted_a = RepoCache.of(CacheScope(tmp_path / "cache", "101", TRUSTED), runner.cache_key("cpu")).trusted_dir

    seed = run("101", TRUSTED, None)
    assert fx_hits(seed["first"]) == 0
    pristine = tree_digest(trusted_a)
    assert any(name.endswith(".py") for name in pristine), pristine

    attack = run("101", UNTRUSTED, 7, mode="attack")
    assert attack["files_before"] and fx_hits(attack["first"]) >= 1, "an untrusted PR starts warm"
    assert attack["pwned"], "the payload runs in the attacker's own job: the replay is a real attack"
    assert tree_digest(trusted_a) == pristine, "the untrusted job changed the trusted cache"

    later_trusted = run("101", TRUSTED, None)
    other_pr = run("101", UNTRUSTED, 8)
    # Walking the whole filesystem only makes sense in a container; LocalRunner makes no such promise.
    # The precompiled header is the image's own (runners/header_seed.py: every repository's cache starts with it), not
    # something repository A compiled: it is neither A's entry nor a secret.
    names = [Path(name).name for name in pristine if len(Path(name).name) >= 20 and not name.startswith(SEEDED)]
    other_repo = run("202", TRUSTED, None, forbidden=names if isinstance(runner, DockerRunner) else None)
    for report in (later_trusted, other_pr, other_repo):
        assert not report["pwned"] and not report["marker_before"] and report["py_with_payload"] == 0, report
    assert fx_hits(later_trusted["first"]) >= 1 and fx_hits(other_pr["first"]) >= 1, "repository A stays warm"
    own = [name for name in other_repo["files_before"] if not name.startswith(SEEDED)]
    assert own == [] and fx_hits(other_repo["first"]) == 0, "B never sees A's entries"
    assert other_repo.get("forbidden_seen", []) == [], other_repo["forbidden_seen"]
    layers = trusted_a.parent / "layers"
    assert not layers.exists() or list(layers.iterdir()) == [], "untrusted layers are thrown away"


def test_a_job_cannot_list_another_repositorys_cache(docker_runner: DockerRunner, tmp_path: Path) -> None:
    secret = RepoCache.of(CacheScope(tmp_path / "cache", "101", TRUSTED), docker_runner.cache_key("cpu"))
    (secret.trusted_dir / "inductor" / "ab").mkdir(parents=True)
    (secret.trusted_dir / "inductor" / "ab" / "private_constants_c0ffee.py").write_text("SECRET = 42\n")
    code = ("import os, pathlib, json\n"
            "hits = [str(p) for top in pathlib.Path('/').iterdir() if str(top) not in ('/proc', '/sys', '/dev')\n"
            "        for p in top.rglob('*c0ffee*')]\n"
            "print(json.dumps({'hits': hits, 'cache': sorted(os.listdir('/tmp/torchinductor_runner'))}))\n")
    for trust, pr in ((TRUSTED, None), (UNTRUSTED, 3)):
        out = tmp_path / f"out-{trust}"
        spec = RunSpec(job_id=f"lister-{trust}", command=("python", "-c", code), checkout_dir=tmp_path / "src",
                       output_dir=out, timeout_s=120, cache=CacheScope(tmp_path / "cache", "202", trust, pr))
        (tmp_path / "src").mkdir(exist_ok=True)
        assert docker_runner.run(spec).exit_code == 0, spec.log_path.read_text()
        seen = json.loads(spec.log_path.read_text().strip().splitlines()[-1])
        # Its own repository's cache holds nothing of another's: only the image's precompiled header (header_seed).
        assert seen["hits"] == [] and set(seen["cache"]) <= {SEEDED.rstrip("/")}, seen


@pytest.mark.skipif(sys.platform != "linux", reason="overlay mounts are Linux-only")
def test_the_copy_layer_holds_the_same_line(docker_client: object, tmp_path: Path) -> None:
    """Engines that cannot mount overlays use a per-job copy: the attacker's writes die with it too."""
    runner = DockerRunner(untrusted_layer="copy")
    try:
        scope = CacheScope(tmp_path / "cache", "101", TRUSTED)
        trusted = RepoCache.of(scope, runner.cache_key("cpu")).trusted_dir
        trusted.mkdir(parents=True)
        (trusted / "mod.py").write_text("VALUE = 'pristine'\n")
        for path in (trusted, trusted / "mod.py"):  # as a trusted job (uid 10001) would have left them
            os.chown(path, RUNNER_UID, RUNNER_UID) if os.geteuid() == 0 else path.chmod(0o777)
        attack = ("import pathlib; c = pathlib.Path('/tmp/torchinductor_runner')\n"
                  "assert (c / 'mod.py').read_text() == \"VALUE = 'pristine'\\n\"\n"
                  "(c / 'mod.py').write_text('VALUE = 1/0\\n'); (c / 'MARKER').write_text('x')\n")
        spec = RunSpec(job_id="copy-attack", command=("python", "-c", attack), checkout_dir=tmp_path,
                       output_dir=tmp_path / "out", timeout_s=120, cache=CacheScope(scope.root, "101", UNTRUSTED, 5))
        assert runner.run(spec).exit_code == 0, spec.log_path.read_text()
        assert sorted(p.name for p in trusted.iterdir()) == ["mod.py"]
        assert (trusted / "mod.py").read_text() == "VALUE = 'pristine'\n"
    finally:
        runner.sweep_leftovers()
        runner.close()
