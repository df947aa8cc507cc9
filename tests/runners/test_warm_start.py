"""LocalRunner's warm interpreter (runners/warm_start.py, suites/warm_process.py): a job forked from it is the job a
fresh interpreter runs, and keeps nothing for the next.

A sample repository with its own package and tests (a compiled function, a wrong expectation, its process's state)
and a compiler patch in its conftest, run through the LocalRunner: fresh and forked give the same outcomes and the
same compiler fingerprint; a forked job has its own random seeds, temporary directory and environment, cannot read
the warm interpreter's memory, and what it rebinds in torch is gone in the next job forked from the same
interpreter. A forked job past its time is killed with its process group; a warm interpreter that dies under a job
makes it an infrastructure error. Jobs that cannot be forked faithfully start fresh.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runners import first_code, warm_start
from runners.compile_cache import TRUSTED, CacheScope
from runners.local import LocalRunner
from runners.protocol import RunResult, RunSpec
from service.jobs.pipeline import pytest_command

ROOT = Path(__file__).resolve().parents[2]
FORKED = "forked from this host's warm interpreter"
MODEL = '''
import torch


def double_sin(x):
    return torch.sin(x) * 2 + torch.cos(x)
'''
PATCH = '''
import torch._inductor.decomposition as decomposition

_stock = decomposition.select_decomp_table


def select_decomp_table():  # the repository's own wrapper of one of inductor's functions
    return _stock()


decomposition.select_decomp_table = select_decomp_table
'''
TESTS = '''
import json, os, random, sys, tempfile

import torch

from warmpkg.model import double_sin


def test_a_state():
    ppid = os.getppid()
    try:
        open(f"/proc/{ppid}/mem", "rb").close()
        mem = "opened"
    except OSError as exc:
        mem = type(exc).__name__
    state = {"pid": os.getpid(), "ppid": ppid, "random": random.random(), "torch_rand": torch.rand(1).item(),
             "tempdir": tempfile.gettempdir(), "environ": sorted(os.environ), "mem": mem,
             "path": [p.replace(os.getcwd(), "CWD").replace(os.environ["COMPILE_CI_CHECKOUT"], "REPO")
                      for p in sys.path],
             "poisoned": hasattr(torch, "_warm_poison"),
             "dumpable": __import__("ctypes").CDLL(None).prctl(3, 0, 0, 0, 0)}
    with open(os.path.join(os.environ["COMPILE_CI_OUTPUT_DIR"], "state.json"), "w") as handle:
        json.dump(state, handle)


def test_compiled_matches():
    x = torch.linspace(-2, 2, 32)
    torch.testing.assert_close(torch.compile(double_sin)(x), double_sin(x))


def test_wrong_expectation_fails():
    assert torch.compile(double_sin)(torch.ones(3)).sum().item() == 0


def test_z_poisons_its_process():
    import torch._inductor.lowering as lowering

    torch._warm_poison = True
    lowering.make_fallback = lambda *args, **kwargs: None
'''


def checkout(tmp_path: Path, name: str, patched: bool) -> Path:
    root = tmp_path / name
    (root / "warmpkg").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "warmpkg" / "__init__.py").write_text("")
    (root / "warmpkg" / "model.py").write_text(MODEL)
    (root / "warmpkg" / "patch.py").write_text(PATCH)
    (root / "conftest.py").write_text("import sys, os\nsys.path.insert(0, os.path.dirname(__file__))\n" +
                                      ("import warmpkg.patch  # noqa: F401\n" if patched else ""))
    (root / "tests" / "test_warm.py").write_text(TESTS)
    return root


def run(runner: LocalRunner, repo: Path, out: Path, timeout_s: float = 300, args: tuple[str, ...] = ()) -> RunResult:
    command = (*pytest_command(runner.python, out / "junit.xml"), "--rootdir", str(repo), str(repo / "tests"), *args)
    env = {"COMPILE_CI_DEVICE": "cpu", "COMPILE_CI_CHECKOUT": str(repo), "COMPILE_CI_OUTPUT_DIR": str(out),
           "COMPILE_CI_TARGETS": "{}", "COMPILE_CI_DEADLINE": str(int(time.time() + timeout_s))}
    cache = CacheScope(out.parent / "cache", "warm", TRUSTED, None)  # one repository's, as its pushes fill it
    return runner.run(RunSpec(job_id=out.name, command=command, checkout_dir=repo, output_dir=out,
                              timeout_s=timeout_s, env=env, cache=cache, suites_dir=ROOT / "suites"))


def outcomes(out: Path) -> dict[str, str]:
    import xml.etree.ElementTree as ET

    found = {}
    for case in ET.parse(out / "junit.xml").getroot().iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        found[case.get("name", "")] = kinds[0] if kinds else "passed"
    return found


def read(out: Path) -> tuple[dict[str, str], str, dict, bool]:
    log = (out / "log.txt").read_text(errors="replace")
    fingerprint = json.loads((out / "surface.json").read_text())["fingerprint"]
    return outcomes(out), fingerprint, json.loads((out / "state.json").read_text()), FORKED in log


@pytest.fixture
def runner() -> LocalRunner:
    warm_start.close_all()
    return LocalRunner(warm=True)


def test_a_forked_job_is_the_fresh_job_and_leaves_nothing_behind(runner: LocalRunner, tmp_path: Path) -> None:
    plain, patched = checkout(tmp_path, "plain", False), checkout(tmp_path, "patched", True)
    fresh = run(runner, plain, tmp_path / "fresh")  # no warm interpreter yet: fresh; it starts one
    assert warm_start.wait_until_ready(120)
    forked = run(runner, plain, tmp_path / "forked")
    patched_forked = run(runner, patched, tmp_path / "patched-forked")  # after `forked` poisoned its own process
    runner.warm = False  # COMPILE_CI_WARM_START=false
    patched_fresh = run(runner, patched, tmp_path / "patched-fresh")
    assert patched_forked.exit_code == patched_fresh.exit_code == 1
    runs = {name: read(tmp_path / name) for name in ("fresh", "forked", "patched-forked", "patched-fresh")}
    for name, result in (("fresh", fresh), ("forked", forked)):
        assert result.exit_code == 1 and result.infra_error is None, (name, result)
    assert [runs[n][3] for n in runs] == [False, True, True, False]
    expected = {"test_a_state": "passed", "test_compiled_matches": "passed", "test_wrong_expectation_fails": "failure",
                "test_z_poisons_its_process": "passed"}
    assert all(runs[n][0] == expected for n in runs), {n: runs[n][0] for n in runs}
    # The compiler fingerprint (its last test's rebinding counted in every run): the same fresh and forked, and the
    # conftest's patch tells the two repositories apart either way.
    assert runs["fresh"][1] == runs["forked"][1] != ""
    assert runs["patched-forked"][1] == runs["patched-fresh"][1] not in ("", runs["fresh"][1])
    # The generated code of the compiled test: the same, fresh or forked, in either order.
    codes = {n: sorted(p.read_text() for p in (tmp_path / n / "tests").glob("*compiled_matches*/output_code_*.py"))
             for n in runs}
    assert codes["fresh"] and codes["fresh"] == codes["forked"], {n: len(c) for n, c in codes.items()}
    assert codes["patched-forked"] and codes["patched-forked"] == codes["patched-fresh"]
    states = {n: runs[n][2] for n in runs}
    forked_states = [states[n] for n in ("forked", "patched-forked")]
    # Nothing of an earlier job: its rebinding of torch and its variables are gone.
    assert not any(s["poisoned"] for s in states.values())
    # Its own seeds (each fresh interpreter draws its own: so does each fork), directory and variables.
    assert len({s["random"] for s in states.values()}) == len({s["torch_rand"] for s in states.values()}) == len(states)
    for name, state in states.items():
        assert state["tempdir"] == str(tmp_path / f"{name}.job" / "tmp"), (name, state)
        assert state["path"] == states["fresh"]["path"] and "CWD" in state["path"], (name, state["path"])
    assert all(s["environ"] == states["fresh"]["environ"] for s in forked_states)
    # The warm interpreter's memory is out of the job's reach: it is not dumpable (only a root job, which can do
    # anything on its host, may still open it); the job's own process is dumpable, as a fresh one is.
    assert all(s["dumpable"] == 1 for s in states.values())
    if os.getuid() != 0:
        assert all(s["mem"] == "PermissionError" for s in forked_states), forked_states
    assert len({s["ppid"] for s in forked_states}) == 1 and states["fresh"]["ppid"] != forked_states[0]["ppid"]


SLEEPER = '''
import os, time


def test_sleeps():
    open(os.path.join(os.environ["COMPILE_CI_OUTPUT_DIR"], "pid"), "w").write(str(os.getpid()))
    time.sleep(600)
'''


def _sleeper(tmp_path: Path) -> Path:
    repo = tmp_path / "sleeper"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "test_sleep.py").write_text(SLEEPER)
    return repo


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_a_forked_job_past_its_time_is_killed_and_a_dead_warm_interpreter_is_the_services_error(
        runner: LocalRunner, tmp_path: Path) -> None:
    repo = _sleeper(tmp_path)
    # A process-wide default socket timeout, as a Celery worker's shutdown leaves one for a while (5 s: seen in a
    # full test run, where the embedded workers of earlier tests had set it): the warm interpreter's socket must not
    # take it, or every forked job running longer was lost when the runner's read of that socket timed out.
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(1.0)
    try:
        run(runner, repo, tmp_path / "first", timeout_s=1)  # starts the warm interpreter
    finally:
        socket.setdefaulttimeout(previous)
    assert warm_start.wait_until_ready(120)
    timed = run(runner, repo, tmp_path / "timed", timeout_s=12)
    assert timed.timed_out and FORKED in (tmp_path / "timed" / "log.txt").read_text()
    # pid file copied out with the job's output: that process is gone
    assert not _alive(int((tmp_path / "timed" / "pid").read_text()))
    (warm,) = warm_start._pool.values()
    import threading

    def kill_when_running() -> None:
        private = tmp_path / "orphan.job" / "out" / "pid"
        while not private.exists():
            time.sleep(0.05)
        os.kill(warm.proc.pid, signal.SIGKILL)

    threading.Thread(target=kill_when_running, daemon=True).start()
    lost = run(runner, repo, tmp_path / "orphan", timeout_s=120)
    assert lost.infra_error and "warm interpreter" in lost.infra_error, lost
    assert not _alive(int((tmp_path / "orphan" / "pid").read_text()))


def test_jobs_that_cannot_be_forked_faithfully_start_fresh(tmp_path: Path) -> None:
    python = sys.executable
    env = {"COMPILE_CI_OUTPUT_DIR": str(tmp_path / "out"), "PATH": os.environ.get("PATH", "")}
    # Not the job's own command (an install's wrapper), or not a job at all: never a warm start.
    assert warm_start.start(python, ["sh", "-c", "true"], tmp_path, env) is None
    assert warm_start.start(python, [python, "-m", "suites.pytest_entry"], tmp_path, {"PATH": "/bin"}) is None
    warm_start.close_all()
    assert warm_start.start(python, [python, "-m", "suites.pytest_entry"], tmp_path, env) is None  # starts one
    assert len(warm_start._pool) == 1 and warm_start.wait_until_ready(120)
    env_other = {**env, "TORCHINDUCTOR_FREEZING": "1"}  # a variable torch reads at import: an interpreter of its own
    assert warm_start.start(python, [python, "-m", "suites.pytest_entry"], tmp_path, env_other) is None
    assert len(warm_start._pool) == 2
    warm_start.close_all()
    # A checkout with a module of the name of one the warm interpreter imported after torch: a fresh process could
    # import the checkout's own.
    repo = tmp_path / "repo"
    (repo / "tests" / "pluggy").mkdir(parents=True)
    assert first_code.shadows(str(repo), frozenset({"pluggy", "_pytest"}))
    (repo / "tests" / "pluggy").rmdir()
    (repo / "tests" / "test_x.py").write_text("")
    assert not first_code.shadows(str(repo), frozenset({"pluggy", "_pytest"}))
    (repo / "_pytest.py").write_text("")
    assert first_code.shadows(str(repo), frozenset({"pluggy", "_pytest"}))
    # Which variables a job may have of its own: its directories, caches, GPUs and compile-ci's settings.
    assert all(warm_start.per_job(k) for k in ("HOME", "TMPDIR", "COMPILE_CI_DEADLINE", "CUDA_VISIBLE_DEVICES"))
    assert not any(warm_start.per_job(k) for k in ("COMPILE_CI_SOURCE_KEYS", "TORCHINDUCTOR_FREEZING", "PYTHONPATH",
                                                   "OMP_NUM_THREADS", "LD_PRELOAD"))


DIES = '''
import os, sys, threading
from runners.warm_interpreter import Warm

warm = Warm(sys.executable, {"PATH": os.environ["PATH"]})
assert warm.ready.wait(120), "not ready"
print(warm.home, warm.proc.pid, flush=True)
threading.Event().wait()  # until killed
'''


def test_a_warm_interpreter_whose_runner_is_killed_removes_its_own_directory() -> None:
    # The runner (a worker's process) SIGKILLed: it never closes its warm interpreter, which saw its socket end and
    # ended alone, leaving its directory in /tmp (about 12 per test run before).
    runner = subprocess.Popen([sys.executable, "-c", DIES], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    home, pid = runner.stdout.readline().split()  # type: ignore[union-attr]
    gone = os.pidfd_open(int(pid))
    assert Path(home, "given.json").exists()
    runner.kill()
    runner.wait()
    runner.stdout.close()  # type: ignore[union-attr]
    assert select.select([gone], [], [], 60)[0], "the warm interpreter outlived its runner"
    os.close(gone)
    assert not Path(home).exists()
