"""The tests' zygote (tests/zygote.py): a suite run forked from it is the run a fresh `python -m pytest` makes, with
its own arguments, directory, environment, session and random state; one zygote serves every run whose environment
differs only in compile-ci's and pytest's own variables; plants and job-like runs get no compiler imported ahead; a
job's own command (`python -m suites.pytest_entry`) forked from it is the fresh job, down to the compiler patch its
repository makes and the files it writes; a run past its time is killed with its process group."""

from __future__ import annotations

import json
import os
import re
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


CHECKOUT_CONFTEST = '''
def pytest_configure(config):
    # The repository's compiler patch: one of inductor's functions rebound, no table, no config.
    from torch._inductor import lowering

    stock = lowering.make_pointwise

    def make_pointwise(*args, **kwargs):
        return stock(*args, **kwargs)

    lowering.make_pointwise = make_pointwise
'''
ENTRY_PROBE = '''
import json, os, random, sys, tempfile
import numpy, torch

def test_probe():
    with open(os.environ["COMPILE_CI_PROBE_OUT"], "w") as out:
        json.dump({"cwd": os.getcwd(), "path": sys.path, "orig": sys.orig_argv[1:3], "tmp": tempfile.gettempdir(),
                   "leader": os.getsid(0) == os.getpid(), "seed": torch.initial_seed(), "random": random.random(),
                   "numpy": float(numpy.random.random()), "tests": sys.modules["tests"].__file__}, out)
    assert os.environ.get("COMPILE_CI_PROBE_FAIL") != "1"
'''


def _job(checkout: Path, work: Path, fresh: bool, **extra: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    work.mkdir()
    out = work / "out"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("COMPILE_CI_")},
           "PYTHONPATH": str(Path(zygote.__file__).parents[1]), "COMPILE_CI_DEVICE": "cpu",
           "COMPILE_CI_CHECKOUT": str(checkout), "COMPILE_CI_OUTPUT_DIR": str(out),
           "COMPILE_CI_PROBE_OUT": str(work / "probe.json"), "TORCHINDUCTOR_CACHE_DIR": str(work / "inductor"),
           **extra}
    command = [sys.executable, "-m", "suites.pytest_entry", "-q", "-p", "no:cacheprovider", "-p", "suites.plugin",
               "-o", "junit_family=xunit1", f"--junitxml={out / 'junit.xml'}", "--rootdir", str(checkout),
               str(checkout / "tests")]
    if fresh:
        done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=300)
    else:
        done = zygote.run(command, cwd=work, env=env, timeout=300)
    return done, json.loads((work / "probe.json").read_text())


def _summary(done: subprocess.CompletedProcess[str]) -> str:
    return re.sub(r" in [0-9.]+s\b.*", "", (done.stdout + done.stderr).strip().splitlines()[-1])


def test_a_forked_job_is_the_fresh_job_down_to_its_repositorys_compiler_patch(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    (checkout / "tests").mkdir(parents=True)
    (checkout / "conftest.py").write_text(CHECKOUT_CONFTEST)
    (checkout / "tests" / "__init__.py").write_text("")  # its own `tests` package, as the zygote's module is named
    (checkout / "tests" / "test_probe.py").write_text(ENTRY_PROBE)
    before = dict(zygote.counts)
    fresh, fresh_probe = _job(checkout, tmp_path / "fresh", True)
    runs = [_job(checkout, tmp_path / name, False, **extra)
            for name, extra in (("first", {}), ("second", {"COMPILE_CI_PROBE_FAIL": "1"}))]
    assert zygote.counts["forked"] - before["forked"] == 2, zygote.counts
    assert zygote.counts["zygotes"] - before["zygotes"] <= 1, zygote.counts
    surfaces = [json.loads((tmp_path / name / "out" / "surface.json").read_text()) for name in ("fresh", "first")]
    assert surfaces[0] == surfaces[1] and "make_pointwise" in json.dumps(surfaces[0]), surfaces
    files = [sorted(str(p.relative_to(tmp_path / name / "out")) for p in (tmp_path / name / "out").rglob("*"))
             for name in ("fresh", "first", "second")]
    assert files[0] == files[1] and sorted(set(files[2]) - set(files[1])) == [
        f"tests/{Path(files[1][-1]).parts[1]}/repro.py"], files  # the failed test's repro, its one more file
    for (_done, probe), name in zip(runs, ("first", "second"), strict=True):
        work = str(tmp_path / name)
        assert (probe["cwd"], probe["orig"]) == (work, ["-m", "suites.pytest_entry"]), probe
        assert probe["path"] == [work if entry == str(tmp_path / "fresh") else entry for entry in fresh_probe["path"]]
        assert probe["tmp"] == fresh_probe["tmp"] and probe["leader"], probe
        assert probe["tests"] == fresh_probe["tests"] == str(checkout / "tests" / "__init__.py"), probe
    # pytest's summary (outcomes and the warnings shown, the imports' own among them) is the fresh job's
    assert _summary(runs[0][0]) == _summary(fresh) and "1 passed" in _summary(fresh), (fresh.stdout, runs[0][0].stdout)
    assert (fresh.returncode, runs[0][0].returncode, runs[1][0].returncode) == (0, 0, 1), runs[1][0].stdout
    probes = [fresh_probe, runs[0][1], runs[1][1]]
    for key in ("seed", "random", "numpy"):
        assert len({probe[key] for probe in probes}) == 3, (key, probes)


def test_which_runs_fork_from_which_kind_of_zygote() -> None:
    plain = [sys.executable, "-m", "pytest", "suites/passes", "-k", "x"]
    assert zygote.kind_of(plain, {}) == "compiler"
    assert zygote.kind_of([*plain, "-p", "tests.suites.planted.cos_to_sin_compiler"], {}) == "torch"
    assert zygote.kind_of([*plain, "-p", "suites.plugin"], {"COMPILE_CI_OUTPUT_DIR": "/out"}) == "torch"
    entry = [sys.executable, "-m", "suites.pytest_entry", "tests"]
    assert zygote.kind_of(entry, {"COMPILE_CI_OUTPUT_DIR": "/out"}) == "entry"
    assert zygote.kind_of(entry, {}) == zygote.kind_of(["python3", "-m", "pytest"], {}) == ""  # fresh
    # The entry kind is keyed as production's warm interpreters are: the source keys are read before the fork.
    assert zygote.per_run("TORCHINDUCTOR_CACHE_DIR", "entry") and zygote.per_run("COMPILE_CI_CHECKOUT", "entry")
    assert not zygote.per_run("COMPILE_CI_SOURCE_KEYS", "entry") and not zygote.per_run("PYTHONPATH", "entry")
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
    with pytest.raises(subprocess.TimeoutExpired):
        zygote.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_slow.py"], cwd=tmp_path,
                   env=env, timeout=30)
    pid = int((tmp_path / "child.pid").read_text())
    try:
        handle = os.pidfd_open(pid)
    except ProcessLookupError:
        return  # gone already
    with os.fdopen(handle) as process:  # readable once the process has ended
        assert select.select([process], [], [], 30)[0], f"the run's own child {pid} outlived the time limit"
