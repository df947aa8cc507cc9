"""The suite tests' forked runs (tests/suites/fork_server.py) are the fresh `python -m pytest` they stand in for: the
same outcomes, exit status, output, working directory, first path entry, argv, environment; each its own random
state; a run past its time limit killed with its session while the server goes on serving."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runners import warm_start
from tests.suites.fork_server_client import _server, entry_run, forked_run
from tests.suites.suite_run import REPO

PROBE = '''
import json, os, random, sys

import numpy
import pytest


def test_state():
    here = os.getcwd()
    state = {"argv0": os.path.basename(sys.argv[0]), "argv": sys.argv[1:], "cwd": here,
             "path": [entry.replace(here, "HERE") for entry in sys.path],
             "mine": os.environ.get("COMPILE_CI_PROBE"), "gone": os.environ.get("PROBE_GONE"),
             "random": random.random(), "numpy": numpy.random.random()}
    with open(os.path.join(os.getcwd(), "state.json"), "w") as handle:
        json.dump(state, handle)


def test_fails():
    print("said on stdout")
    assert 1 == 2, "a failure's message"


@pytest.mark.skipif(os.environ.get("COMPILE_CI_PROBE_SLOW") != "1", reason="only when asked")
def test_slow():
    import time
    time.sleep(600)
'''


def _probe(tmp_path: Path, name: str) -> tuple[list[str], Path, dict[str, str]]:
    work = tmp_path / name
    work.mkdir()
    (work / "test_probe.py").write_text(PROBE)
    env = {key: value for key, value in os.environ.items() if key != "PROBE_GONE"}
    env["COMPILE_CI_PROBE"] = name  # a compile-ci variable: the run's own, not the server's key
    return ["-q", "-p", "no:cacheprovider", "test_probe.py"], work, env


def test_a_forked_run_is_the_fresh_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROBE_GONE", "the test process's own")
    args, fresh_dir, env = _probe(tmp_path, "fresh")
    fresh = subprocess.run([sys.executable, "-m", "pytest", *args], cwd=fresh_dir, env=env, capture_output=True,
                           text=True, timeout=300)
    states = {}
    for name in ("forked", "forked again"):
        args, work, env = _probe(tmp_path, name)
        forked = forked_run(args, work, env, 300)
        assert (forked.returncode, fresh.returncode) == (1, 1), forked.stdout + forked.stderr
        for said in ("said on stdout", "a failure's message", "1 failed, 1 passed, 1 skipped"):
            assert said in forked.stdout and said in fresh.stdout, forked.stdout
        states[name] = json.loads((work / "state.json").read_text())
    expected = json.loads((fresh_dir / "state.json").read_text())
    for name, state in states.items():
        assert state["argv0"] == expected["argv0"] == "__main__.py" and state["argv"] == expected["argv"]
        assert state["path"] == expected["path"] and state["path"][0] == "HERE", (state["path"], expected["path"])
        assert state["cwd"] == str(tmp_path / name) and state["mine"] == name
        assert state["gone"] is None
    for generator in ("random", "numpy"):  # each run its own state, as each fresh process has
        assert states["forked"][generator] != states["forked again"][generator], generator


def test_a_forked_run_past_its_time_is_killed_and_the_server_goes_on(tmp_path: Path) -> None:
    args, work, env = _probe(tmp_path, "slow")
    server = _server(env)
    with pytest.raises(subprocess.TimeoutExpired):
        forked_run([*args, "-k", "slow"], work, {**env, "COMPILE_CI_PROBE_SLOW": "1"}, 3)
    args, work, env = _probe(tmp_path, "after")
    after = forked_run([*args, "-k", "state"], work, env, 300)
    assert after.returncode == 0 and json.loads((work / "state.json").read_text())["mine"] == "after", after.stdout
    assert _server(env) is server and server is not None and server.proc.poll() is None
    # the next test's id in the environment: the same server (one per test would start torch for each)
    assert _server({**env, "PYTEST_CURRENT_TEST": "tests/x.py::test_next (call)"}) is server


def test_a_jobs_entry_run_is_forked_from_the_warm_interpreter_once_it_is_ready(tmp_path: Path) -> None:
    """`entry_run` (a job's `suites.pytest_entry` command in the suite tests) is the LocalRunner's start: the first
    run of an environment fresh, the next forked, with the same outcome (runners/warm_start.py, proven the fresh job
    in tests/runners/test_warm_start.py)."""
    (tmp_path / "test_one.py").write_text("import os\n\nimport torch\n\n\ndef test_it():\n"
                                          "    open('parent', 'a').write(f'{os.getppid()}\\n')\n"
                                          "    assert torch.ones(2).sum() == 2\n")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("COMPILE_CI_")}, "PYTHONPATH": str(REPO),
           "PROBE_ENVIRONMENT": str(tmp_path)}  # an environment of its own: no warm interpreter yet
    runs = []
    for name in ("first", "second"):
        out = tmp_path / name
        command = [sys.executable, "-m", "suites.pytest_entry", "-q", "-p", "no:cacheprovider", "-p", "suites.plugin",
                   f"--junitxml={out / 'junit.xml'}", "test_one.py"]
        runs.append(entry_run(command, tmp_path, {**env, "COMPILE_CI_OUTPUT_DIR": str(out)}, 300))
        assert warm_start.wait_until_ready(120)
    assert [run.returncode for run in runs] == [0, 0] and all("1 passed" in run.stdout for run in runs), runs
    first, second = (tmp_path / "parent").read_text().split()
    assert int(first) == os.getpid() and int(second) != os.getpid(), (first, second)  # fresh, then forked
