"""The tests' zygote (tests/zygote.py): a suite run forked from it is the run a fresh `python -m pytest` makes, with
its own arguments, directory, environment, session and random state; one zygote serves every run whose environment
differs only in compile-ci's and pytest's own variables; plants and job-like runs get no compiler imported ahead; a
run past its time is killed with its process group."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path

import pytest

from tests import zygote

PROBE = '''
import json, os, random, sys, tempfile
import torch

def test_probe():
    with open(os.environ["COMPILE_CI_PROBE_OUT"], "w") as out:
        json.dump({"cwd": os.getcwd(), "path0": sys.path[0], "argv": sys.argv[1:], "orig": sys.orig_argv[1:3],
                   "own": os.environ.get("COMPILE_CI_PROBE_OWN"), "tmp": tempfile.gettempdir(),
                   "leader": os.getsid(0) == os.getpid(), "seed": torch.initial_seed(), "random": random.random(),
                   "inductor": "torch._inductor.compile_fx" in sys.modules}, out)
    print("probe printed")
    sys.stderr.write("probe warned\\n")
    assert os.environ.get("COMPILE_CI_PROBE_FAIL") != "1"
'''


def _run(tmp_path: Path, name: str, fresh: bool, **extra: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    work = tmp_path / name
    work.mkdir()
    (work / "test_probe.py").write_text(PROBE)
    env = {**os.environ, "COMPILE_CI_PROBE_OUT": str(work / "probe.json"), "COMPILE_CI_PROBE_OWN": name,
           "COMPILE_CI_OUTPUT_DIR": str(work / "out"), **extra}  # job-like: the zygote of the torch kind
    # importlib's import mode leaves sys.path as the interpreter set it (prepend would put the test's directory first)
    command = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "--import-mode=importlib",
               "test_probe.py"]
    if fresh:
        done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=120)
    else:
        done = zygote.run(command, cwd=work, env=env, timeout=120)
    return done, json.loads((work / "probe.json").read_text())


def test_a_forked_run_is_the_fresh_run_and_one_zygote_serves_runs_that_differ_in_their_own_variables(
        tmp_path: Path) -> None:
    before = dict(zygote.counts)
    fresh, fresh_probe = _run(tmp_path, "fresh", True)
    first, first_probe = _run(tmp_path, "first", False)
    second, second_probe = _run(tmp_path, "second", False, COMPILE_CI_PROBE_FAIL="1")
    assert zygote.counts["forked"] - before["forked"] == 2, zygote.counts
    assert zygote.counts["zygotes"] - before["zygotes"] <= 1, zygote.counts  # one per environment and process
    for done, probe, name in ((first, first_probe, "first"), (second, second_probe, "second")):
        work = str(tmp_path / name)
        assert (probe["cwd"], probe["path0"], probe["own"]) == (work, work, name), probe
        assert probe["argv"] == fresh_probe["argv"] and probe["orig"] == fresh_probe["orig"] == ["-m", "pytest"]
        assert probe["tmp"] == fresh_probe["tmp"] and probe["leader"] and not probe["inductor"], probe
        assert "probe printed" in done.stdout and "probe warned" in done.stderr, (done.stdout, done.stderr)
    assert (fresh.returncode, first.returncode, second.returncode) == (0, 0, 1), second.stdout
    # Each child seeds itself as a fresh interpreter does, not from the zygote's state.
    assert len({fresh_probe["seed"], first_probe["seed"], second_probe["seed"]}) == 3
    assert first_probe["random"] != second_probe["random"]


def test_the_compiler_is_imported_ahead_only_for_runs_without_a_plant_or_a_jobs_output() -> None:
    plain = [sys.executable, "-m", "pytest", "suites/passes", "-k", "x"]
    assert zygote.kind_of(plain, {}) == "compiler"
    assert zygote.kind_of([*plain, "-p", "tests.suites.planted.cos_to_sin_compiler"], {}) == "torch"
    assert zygote.kind_of([*plain, "-p", "suites.plugin"], {"COMPILE_CI_OUTPUT_DIR": "/out"}) == "torch"
    assert zygote.per_run("COMPILE_CI_CHECKOUT") and zygote.per_run("PYTEST_CURRENT_TEST")
    # What torch or the compiler reads at import keys the zygote: a run that changes it gets another one.
    assert not any(zygote.per_run(name) for name in ("TORCHINDUCTOR_CACHE_DIR", "TMPDIR", "PYTHONPATH",
                                                     "ATEN_CPU_CAPABILITY", "OMP_NUM_THREADS"))


def test_a_run_past_its_time_is_killed_with_its_process_group(tmp_path: Path) -> None:
    (tmp_path / "test_slow.py").write_text(
        "import os, subprocess, sys, time\n"
        "def test_slow():\n"
        "    child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"    open({str(tmp_path / 'child.pid')!r}, 'w').write(str(child.pid))\n"
        "    time.sleep(600)\n")
    env = {**os.environ, "COMPILE_CI_OUTPUT_DIR": str(tmp_path / "out")}
    # 10 s from the request (the zygote is ready before the clock starts): a fork, a one-test collection and a
    # Popen, about 0.3 s quiet; 30 s before, the run's longest idle wait.
    with pytest.raises(subprocess.TimeoutExpired):
        zygote.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_slow.py"], cwd=tmp_path,
                   env=env, timeout=10)
    pid = int((tmp_path / "child.pid").read_text())
    try:
        handle = os.pidfd_open(pid)
    except ProcessLookupError:
        return  # gone already
    with os.fdopen(handle) as process:  # readable once the process has ended
        assert select.select([process], [], [], 30)[0], f"the run's own child {pid} outlived the time limit"
