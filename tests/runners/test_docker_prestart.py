"""Pre-started job containers (runners/docker_prestart.py, suites/warm_container.py) on a real engine: a pull-request
job takes one and reports what a fresh container reports, a job leaves nothing for the next one, a checkout that
could change the early imports starts fresh, and a dead worker's containers are swept."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from runners.compile_cache import CacheScope
from runners.docker_container import DEPLOYMENT_LABEL, LABEL
from runners.docker_prestart import PRESTART_LABEL, Prestarted
from runners.docker_runner import DockerRunner
from runners.prestart_rules import eligible, go_line
from runners.protocol import RunSpec
from service.jobs import install
from tests.runners.test_warm_install import PYPROJECT
from tests.runners.test_warm_start import PATCH  # a repository's wrapper of one of inductor's functions

ROOT = Path(__file__).resolve().parents[2]
MODEL = '''import json, os
import torch
from torch import nn

LEFT = ("/tmp/left-by-a-job", "/tmp/torchinductor_runner/left-by-a-job")
seen = [json.dumps({path: os.path.exists(path) for path in LEFT})]
try:
    open("/job/checkout/written-by-a-job", "w").close()
    seen.append("wrote the checkout")
except OSError as exc:
    seen.append(f"checkout errno {exc.errno}")
with open(os.path.join(os.environ["COMPILE_CI_OUTPUT_DIR"], "spy.txt"), "w") as handle:
    handle.write("\\n".join(seen))
for path in LEFT:
    with open(path, "w") as handle:
        handle.write("a job was here")


class Tiny(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2 + {bug}


def examples():
    return [("tiny", Tiny, (torch.randn(4, 8),))]
'''
WAIT_S = 120
PACKAGED_MODEL = '''import json, os, sys

import torch
from torch import nn

from warminstall import patch  # noqa: F401 - the repository's compiler patch

state = {"path": sys.path, "cwd": os.getcwd(), "package": __file__,
         "environ": {k: v for k, v in os.environ.items() if k.startswith(("PYTHON", "COMPILE_CI_CHECKOUT"))},
         "sitecustomize": getattr(sys.modules.get("sitecustomize"), "__file__", None),
         "compiler_modules": sorted(m for m in sys.modules if m.startswith(("torch._dynamo", "torch._inductor")))}
with open(os.path.join(os.environ["COMPILE_CI_OUTPUT_DIR"], "state.json"), "w") as handle:
    json.dump(state, handle)


class Tiny(nn.Module):
    def forward(self, x):
        return torch.cos(x) * 3


def examples():
    return [("tiny", Tiny, (torch.randn(4, 8),))]
'''


@pytest.fixture
def warm_runner(docker_client: object) -> Iterator[DockerRunner]:
    runner = DockerRunner(deployment=f"tests-{uuid.uuid4().hex[:12]}", warm=True)
    yield runner
    runner.close()
    runner.sweep_leftovers()


def _checkout(root: Path, bug: str = "0", files: dict[str, str] | None = None) -> Path:
    checkout = root / "checkout"
    (checkout / "zoo").mkdir(parents=True)
    (checkout / "zoo" / "__init__.py").write_text("")
    (checkout / "zoo" / "tiny.py").write_text(MODEL.replace("{bug}", bug))
    for name, text in (files or {}).items():
        (checkout / name).write_text(text)
    return checkout


def _spec(root: Path, checkout: Path, name: str, env: dict[str, str] | None = None, pr: int | None = 7) -> RunSpec:
    """`root`: the test's directory (its cache: one repository's); `name`: the job; `pr`: its pull request (None: a
    push of the default branch, trusted)."""
    out = root / "out" / name
    command = ("python", "-m", "suites.pytest_entry", "-v", "-p", "no:cacheprovider", "-p", "suites.plugin",
               "-o", "junit_family=xunit1", f"--junitxml={out / 'junit.xml'}", str(ROOT / "suites" / "correctness"),
               "-k", "test_declared_model and tiny")
    job_env = {"COMPILE_CI_DEVICE": "cpu", "COMPILE_CI_CHECKOUT": str(checkout), "COMPILE_CI_OUTPUT_DIR": str(out),
               "COMPILE_CI_TARGETS": json.dumps({"models": ["zoo.tiny:examples"]}), "PYTHONPATH": str(checkout),
               **(env or {})}
    return RunSpec(job_id=f"prestart-test-{name}-{uuid.uuid4().hex[:6]}", command=command, checkout_dir=checkout,
                   output_dir=out, timeout_s=300, env=job_env,
                   cache=CacheScope(root / "cache", "r", "trusted" if pr is None else "untrusted", pr),
                   suites_dir=ROOT / "suites")


def _outcomes(spec: RunSpec) -> dict[str, str]:
    outcomes = {}
    for case in ET.parse(spec.output_dir / "junit.xml").iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        outcomes[case.get("name", "")] = kinds[0] if kinds else "passed"
    return outcomes


def _spied(spec: RunSpec) -> list[str]:
    """What the job's model saw when imported (tests/runners/test_docker_prestart.py's MODEL writes it)."""
    return (spec.output_dir / "spy.txt").read_text().splitlines()


def test_a_pull_request_job_takes_a_prestarted_container_and_reports_what_a_fresh_one_does(
        warm_runner: DockerRunner, docker_runner: DockerRunner, tmp_path: Path) -> None:
    prestarts = warm_runner.prestarts
    assert prestarts is not None
    # A push of the default branch: trusted, so it starts its own container, and one for the repository's next
    # pull-request job.
    push = _spec(tmp_path, _checkout(tmp_path / "a"), "push", pr=None)
    assert warm_runner.run(push).exit_code == 0
    assert prestarts.taken == 0 and prestarts.wait_for(1, WAIT_S)
    # The next pull request plants a bug (compiled differs from eager): a fresh container and a pre-started one must
    # both fail it, the same way.
    buggy = _checkout(tmp_path / "b", bug="(1.0 if torch.compiler.is_compiling() else 0.0)")
    warm, fresh = _spec(tmp_path, buggy, "warm", pr=8), _spec(tmp_path, buggy, "fresh", pr=8)
    warm_result = warm_runner.run(warm)
    assert prestarts.taken == 1
    fresh_result = docker_runner.run(fresh)
    assert warm_result.exit_code == fresh_result.exit_code == 1, warm.log_path.read_text()[-3000:]
    assert _outcomes(warm) == _outcomes(fresh) == {"test_declared_model[tiny]": "failure"}
    assert "compile-ci: the job starts in a fresh process" not in warm.log_path.read_text()


def test_a_packaged_repository_with_a_compiler_patch_is_the_same_job_prestarted_or_fresh(
        warm_runner: DockerRunner, tmp_path: Path) -> None:
    """Behind its install step (an editable install of its own package, as every pipeline job of such a repository
    runs): the model's view of the process (path, directory, variables, which compiler modules are imported when the
    repository's code first runs), the outcomes and the compiler fingerprint its patch gives are the same."""
    prestarts = warm_runner.prestarts
    assert prestarts is not None
    checkout = tmp_path / "checkout"
    (checkout / "warminstall").mkdir(parents=True)
    (checkout / "pyproject.toml").write_text(PYPROJECT)  # the package `warminstall`
    (checkout / "warminstall" / "__init__.py").write_text("")
    (checkout / "warminstall" / "patch.py").write_text(PATCH)
    (checkout / "warminstall" / "model.py").write_text(PACKAGED_MODEL)
    specs = []
    targets = json.dumps({"models": ["warminstall.model:examples"]})
    for name in ("fresh", "prestarted"):
        plain = _spec(tmp_path, checkout, name, {"COMPILE_CI_TARGETS": targets, "PYTHONPATH": ""})
        spec = RunSpec(**{**plain.__dict__, "command": tuple(install.wrap(list(plain.command), "python", checkout,
                                                                          None, True))})
        assert eligible(spec, "python") == ""
        assert warm_runner.run(spec).exit_code == 0, spec.log_path.read_text()[-3000:]
        specs.append(spec)
        assert prestarts.wait_for(1, WAIT_S)
    fresh, warm = specs
    assert prestarts.taken == 1
    assert "the job starts in a fresh process" not in warm.log_path.read_text()
    state = [json.loads((spec.output_dir / "state.json").read_text()) for spec in specs]
    assert state[0] == state[1]
    assert state[0]["package"].startswith("/tmp/") and "torch._dynamo.utils" in state[0]["compiler_modules"]
    fingerprints = [json.loads((spec.output_dir / "surface.json").read_text())["fingerprint"] for spec in specs]
    assert fingerprints[0] == fingerprints[1] != ""
    assert _outcomes(fresh) == _outcomes(warm) == {"test_declared_model[tiny]": "passed"}


def test_a_job_leaves_nothing_for_the_next_job_on_its_slot(warm_runner: DockerRunner, tmp_path: Path) -> None:
    """The attack: each job writes /tmp, its compile cache and (refused) its checkout; the next job, in the container
    made while the first ran, must see none of it."""
    prestarts = warm_runner.prestarts
    assert prestarts is not None
    checkout = _checkout(tmp_path)
    seen = []
    for attempt in range(3):
        spec = _spec(tmp_path, checkout, f"job{attempt}")
        assert warm_runner.run(spec).exit_code == 0, spec.log_path.read_text()[-3000:]
        seen.append(_spied(spec))
        assert prestarts.wait_for(1, WAIT_S)
    assert prestarts.taken == 2
    nothing_left = json.dumps({"/tmp/left-by-a-job": False, "/tmp/torchinductor_runner/left-by-a-job": False})
    assert seen == [[nothing_left, "checkout errno 30"]] * 3  # EROFS: the checkout is read-only in every container
    assert not (checkout / "written-by-a-job").exists()


def test_a_checkout_that_could_change_the_early_imports_starts_fresh(warm_runner: DockerRunner,
                                                                     tmp_path: Path) -> None:
    prestarts = warm_runner.prestarts
    assert prestarts is not None
    first = _spec(tmp_path, _checkout(tmp_path / "a"), "first")
    assert warm_runner.run(first).exit_code == 0
    assert prestarts.wait_for(1, WAIT_S)
    # On the job's PYTHONPATH, a fresh interpreter runs this at its start: a container that imported before the
    # checkout was there must not skip it.
    custom = _checkout(tmp_path / "b", files={"sitecustomize.py": "print('SPY sitecustomize ran', flush=True)\n"})
    spec = _spec(tmp_path, custom, "custom")
    assert warm_runner.run(spec).exit_code == 0, spec.log_path.read_text()[-3000:]
    assert prestarts.taken == 1
    log = spec.log_path.read_text()
    assert ("compile-ci: the job starts in a fresh process: sitecustomize would be imported from "
            "/job/checkout/sitecustomize.py") in log
    assert "SPY sitecustomize ran" in log.splitlines()


def test_only_untrusted_built_in_suite_jobs_take_prestarted_containers(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    spec = _spec(tmp_path, checkout, "x")
    assert eligible(spec, "python") == ""

    def changed(**kw: object) -> RunSpec:
        return RunSpec(**{**spec.__dict__, **kw})  # type: ignore[arg-type]

    trusted = CacheScope(tmp_path / "cache", "r", "trusted", None)
    assert "trusted" in eligible(changed(cache=trusted), "python")
    wrapped = ("python", "-c", "step", str(checkout), "/tmp/site", "", "--", *spec.command)
    assert eligible(changed(command=wrapped), "python") == ""  # behind the install step
    assert "not compile-ci's pytest" in eligible(changed(command=("python", "-m", "pytest")), "python")
    assert "own tests" in eligible(changed(command=(*wrapped, str(checkout / "tests"))), "python")
    assert "own tests" in eligible(changed(command=(*spec.command, "--rootdir", str(checkout))), "python")
    assert "own tests" in eligible(changed(command=(*spec.command, str(checkout / "tests"))), "python")
    assert "plugin of its own" in eligible(changed(command=(*spec.command, "-p", "zoo.plugin")), "python")
    assert "plugin of its own" in eligible(changed(command=(*spec.command, "-pzoo.plugin")), "python")
    assert "environment" in eligible(changed(env={**spec.env, "PYTEST_ADDOPTS": "-p zoo"}), "python")
    # A shard's plan (every test's recorded time) past what the container reads in one line: the job starts its own.
    assert go_line(["python"], {"COMPILE_CI_SHARD": "x" * (2 << 20)}) is None
    assert json.loads(go_line(["python"], {"COMPILE_CI_SHARD": "{}"}) or b"") == {
        "argv": ["python"], "env": {"COMPILE_CI_SHARD": "{}"}}


def test_a_checkout_is_linked_into_the_container_never_copied(tmp_path: Path) -> None:
    """A pull request chooses its checkout's size: linking costs nothing per byte, a copy would write it all to the
    worker's disk. On another filesystem the link fails (the job then starts its own container, which mounts the
    checkout where it is), and nothing was copied."""
    checkout = tmp_path / "checkout"
    (checkout / "pkg").mkdir(parents=True)
    (checkout / "pkg" / "big.bin").write_bytes(b"x" * 4096)
    (checkout / "link").symlink_to("/etc/passwd")  # copied as a link, never followed
    staging = tmp_path / "staging"
    staging.mkdir()
    Prestarted("", None, None, None, staging, 0.0).fill(checkout)
    assert (staging / "pkg" / "big.bin").stat().st_ino == (checkout / "pkg" / "big.bin").stat().st_ino
    assert os.readlink(staging / "link") == "/etc/passwd"
    elsewhere = Path(tempfile.mkdtemp(dir="/dev/shm"))
    try:
        (elsewhere / "big.bin").write_bytes(b"x" * 4096)
        other = tmp_path / "other-staging"
        other.mkdir()
        with pytest.raises(OSError):
            Prestarted("", None, None, None, other, 0.0).fill(elsewhere)
        assert not (other / "big.bin").exists()
    finally:
        shutil.rmtree(elsewhere)


def test_a_sweep_removes_prestarted_containers_only_once_their_worker_is_gone(docker_client: object) -> None:
    client: docker.DockerClient = docker_client  # type: ignore[assignment]
    deployment = f"tests-{uuid.uuid4().hex[:12]}"
    runner = DockerRunner(deployment=deployment)
    names = {}
    try:
        for holder in (f"{os.uname().nodename}:{os.getpid()}", f"{os.uname().nodename}:{2 ** 22 + 7}"):
            container = client.containers.run(
                "compile-ci/runner-cpu:latest", ["sleep", "300"], detach=True, network_mode="none",
                labels={LABEL: f"prestart-{uuid.uuid4().hex[:6]}", DEPLOYMENT_LABEL: deployment,
                        PRESTART_LABEL: holder})
            names[holder] = container.name
        assert runner.sweep_leftovers() == 1
        left = [c.name for c in client.containers.list(all=True, filters={"label": f"{DEPLOYMENT_LABEL}={deployment}"})]
        assert left == [names[f"{os.uname().nodename}:{os.getpid()}"]]
    finally:
        for name in names.values():
            try:
                client.containers.get(name).remove(force=True)
            except docker.errors.NotFound:
                pass
        runner.close()


def test_a_docker_worker_prestarts_by_default_and_an_operator_can_turn_it_off(docker_client: object) -> None:
    from service.config import Settings
    from service.jobs.tasks import select_runner
    from tests.unit.test_config import MINIMAL

    chosen = {}
    for value in (None, "false"):
        env = {**MINIMAL, "COMPILE_CI_RUNNER": "docker", "COMPILE_CI_DEPLOYMENT": f"tests-{uuid.uuid4().hex[:12]}",
               **({"COMPILE_CI_PRESTART": value} if value else {})}
        runner = select_runner(Settings.from_env(env))
        try:
            assert isinstance(runner, DockerRunner)
            chosen[value] = runner.prestarts is not None
        finally:
            runner.close()
    assert chosen == {None: True, "false": False}
    # The LocalRunner forks its jobs from a warm interpreter by default too; an operator can turn that off.
    local = select_runner(Settings.from_env({**MINIMAL, "COMPILE_CI_RUNNER": "local"}))
    assert local.warm is True  # type: ignore[attr-defined]
    fresh = select_runner(Settings.from_env({**MINIMAL, "COMPILE_CI_RUNNER": "local",
                                             "COMPILE_CI_WARM_START": "false"}))
    assert fresh.warm is False  # type: ignore[attr-defined]


def test_a_forked_worker_process_has_its_own_pool_and_celerys_process_end_removes_what_waits(
        warm_runner: DockerRunner, tmp_path: Path) -> None:
    """Celery's prefork children each run one job at a time and end with os._exit, past atexit."""
    from celery.signals import worker_process_shutdown

    from service.jobs import tasks

    prestarts = warm_runner.prestarts
    assert prestarts is not None
    prestarts.capacity = 4  # a worker of four slots, forked into four children
    assert warm_runner.run(_spec(tmp_path, _checkout(tmp_path / "a"), "push", pr=None)).exit_code == 0
    assert prestarts.wait_for(1, WAIT_S)
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # what the child sees: none of the parent's containers, room for one, its own pid on what it makes
        os.write(write, json.dumps([prestarts.holder, prestarts.capacity, prestarts.take(prestarts._entries[0].key)
                                    if prestarts._entries else None]).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as seen:
        holder, capacity, taken = json.loads(seen.read())
    os.waitpid(child, 0)
    assert (holder.rsplit(":", 1)[1], capacity, taken) == (str(child), 1, None)
    labels = {"label": [PRESTART_LABEL, f"{DEPLOYMENT_LABEL}={warm_runner.deployment}"]}
    assert len(warm_runner.client.containers.list(filters=labels)) == 2  # the container and its output's holder
    tasks._RUNNERS.add(warm_runner)  # as create_worker_celery registers its runner
    worker_process_shutdown.send(sender=None, pid=os.getpid(), exitcode=0)
    assert warm_runner.client.containers.list(all=True, filters=labels) == []
