"""A job with an install step (every pipeline job: service/jobs/install.py wraps it) forked from the warm interpreter
(suites/warm_install.py) is the job a fresh interpreter runs after the step's exec.

A sample repository that is a package of its own (pyproject.toml, installed editable by the step) with a
requirement from its own site directory, and tests that read both and record the process's path, environment and
modules: fresh and forked give the same outcomes, path, environment and compiler fingerprint. A requirement named
like a module the warm interpreter imported (its own `sympy`) or a `.pth` that runs code cannot be forked
faithfully: the fork execs the fresh interpreter after the step, which the log says, and the outcomes are the same.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from runners import warm_start
from runners.compile_cache import TRUSTED, CacheScope
from runners.local import LocalRunner
from runners.protocol import RunResult, RunSpec
from service.jobs import install
from service.jobs.pipeline import pytest_command
from tests.runners.test_warm_start import PATCH, outcomes  # the same compiler patch, the same reading

ROOT = Path(__file__).resolve().parents[2]
FORKED = "forked from this host's warm interpreter"
AFRESH = "the job starts a fresh interpreter after its install step"
PYPROJECT = '''
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "warminstall"
version = "0.1"

[tool.setuptools]
packages = ["warminstall"]
'''
TESTS = '''
import json, os, sys, tempfile

import torch

import warmdep
import warminstall  # noqa: F401
from warminstall.model import triple_cos


def _clean(text):
    return text.replace(tempfile.gettempdir(), "TMP")


def test_state():
    names = ("PYTHON", "COMPILE_CI_CHECKOUT", "WARM")
    state = {"path": [_clean(p) for p in sys.path],
             "environ": {k: _clean(v) for k, v in os.environ.items() if k.startswith(names)},
             "cwd": _clean(os.getcwd()), "dep": _clean(warmdep.__file__),
             "package": _clean(sys.modules["warminstall"].__file__),
             "sitecustomize": _clean(getattr(sys.modules.get("sitecustomize"), "__file__", "") or "")}
    with open(os.path.join(os.environ["COMPILE_CI_OUTPUT_DIR"], "state.json"), "w") as handle:
        json.dump(state, handle)


def test_compiled():
    x = torch.linspace(-1, 1, 16)
    torch.testing.assert_close(torch.compile(triple_cos)(x), triple_cos(x) + warmdep.OFFSET * 0)


def test_fails():
    assert warmdep.OFFSET == 0
'''


def repository(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "warminstall").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / "warminstall" / "__init__.py").write_text(PATCH)  # the package's compiler patch, at its import
    (root / "warminstall" / "model.py").write_text("import torch\n\n\ndef triple_cos(x):\n"
                                                   "    return torch.cos(x) * 3\n")
    (root / "tests" / "test_installed.py").write_text(TESTS)
    return root


def site(tmp_path: Path, name: str, extra: dict[str, str]) -> Path:
    """A requirement's site directory, as the install phase prepares it: a distribution and its metadata."""
    root = tmp_path / name
    (root / "warmdep").mkdir(parents=True)
    (root / "warmdep" / "__init__.py").write_text("OFFSET = 7\n")
    (root / "warmdep-1.0.dist-info").mkdir()
    (root / "warmdep-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: warmdep\nVersion: 1.0\n")
    for path, text in extra.items():
        (root / path).write_text(text)
    return root


def run(runner: LocalRunner, repo: Path, deps: Path, out: Path) -> tuple[RunResult, str]:
    command = (*pytest_command(runner.python, out / "junit.xml"), "--rootdir", str(repo), str(repo / "tests"))
    wrapped = install.wrap(list(command), runner.python, repo, deps, True)
    env = {"COMPILE_CI_DEVICE": "cpu", "COMPILE_CI_CHECKOUT": str(repo), "COMPILE_CI_OUTPUT_DIR": str(out),
           "COMPILE_CI_TARGETS": "{}", "COMPILE_CI_DEADLINE": str(int(time.time() + 300))}
    cache = CacheScope(out.parent / "cache", "warm", TRUSTED, None)
    result = runner.run(RunSpec(job_id=out.name, command=tuple(wrapped), checkout_dir=repo, output_dir=out,
                                timeout_s=300, env=env, cache=cache, suites_dir=ROOT / "suites", deps_dir=deps))
    return result, (out / "log.txt").read_text(errors="replace")


@pytest.fixture
def runner() -> LocalRunner:
    warm_start.close_all()
    yield LocalRunner(warm=True)
    warm_start.close_all()


@pytest.mark.parametrize("wrapper", ["", "WARM_WRAPPER=1 PYTHONPATH={root}${{PYTHONPATH:+:$PYTHONPATH}}",
                                     "PYTHONPATH={root}"], ids=["the interpreter", "a wrapper that adds its path",
                                                                "a wrapper that sets its path"])
def test_a_job_with_an_install_step_forks_and_is_the_fresh_job(runner: LocalRunner, tmp_path: Path,
                                                               wrapper: str) -> None:
    """The runner's python as it is, or a wrapper script (as a host's or a bench's): what the script sets is the
    job's, and a PYTHONPATH it sets instead of adding to leaves the step's boot directory out, as for a fresh job."""
    if wrapper:
        script = tmp_path / "python"
        script.write_text(f'#!/bin/sh\n{wrapper.format(root=ROOT)} exec {sys.executable} "$@"\n')
        script.chmod(0o755)
        runner.python = str(script)
    repo, deps = repository(tmp_path), site(tmp_path, "deps", {})
    # The first job finds no warm interpreter: it runs fresh, as every job of COMPILE_CI_WARM_START=false does (the
    # runner's one path for a job it does not fork), and starts the interpreter the second is forked from.
    fresh, log = run(runner, repo, deps, tmp_path / "fresh")
    assert FORKED not in log and fresh.exit_code is not None, log[-3000:]
    assert warm_start.wait_until_ready(120)
    forked, forked_log = run(runner, repo, deps, tmp_path / "forked")
    assert FORKED in forked_log and AFRESH not in forked_log, forked_log[-3000:]
    assert forked.exit_code == fresh.exit_code and forked.infra_error is None
    assert outcomes(tmp_path / "forked") == outcomes(tmp_path / "fresh"), log[-3000:]
    if wrapper == "PYTHONPATH={root}":  # the requirement is not on the path: the tests' module cannot import it
        assert "No module named 'warmdep'" in (tmp_path / "forked" / "log.txt").read_text()
        assert "test_state" not in outcomes(tmp_path / "forked")
        return
    expected = {"test_state": "passed", "test_compiled": "passed", "test_fails": "failure"}
    assert outcomes(tmp_path / "forked") == expected and fresh.exit_code == 1
    states = {name: json.loads((tmp_path / name / "state.json").read_text()) for name in ("forked", "fresh")}
    assert states["forked"] == states["fresh"], states
    assert states["fresh"]["package"].startswith("TMP/compile-ci-src/"), states["fresh"]  # the step's editable copy
    assert states["fresh"]["dep"] == str(deps / "warmdep" / "__init__.py")
    assert ("WARM_WRAPPER" in states["fresh"]["environ"]) == ("WARM_WRAPPER" in wrapper)
    # The package's patch counted alike (the same change, from the same file of the step's copy).
    surfaces = {name: json.loads((tmp_path / name / "surface.json").read_text()) for name in ("forked", "fresh")}
    assert surfaces["forked"]["fingerprint"] == surfaces["fresh"]["fingerprint"] != "", surfaces
    assert surfaces["forked"]["changes"] == surfaces["fresh"]["changes"] == [
        {"place": surfaces["fresh"]["changes"][0]["place"], "kind": "rebound", "where": "warminstall/__init__.py:7"}]
    assert surfaces["forked"]["reuse"] == surfaces["fresh"]["reuse"] == surfaces["fresh"]["fingerprint"]


def test_a_requirement_whose_pth_runs_code_starts_afresh_after_the_step(runner: LocalRunner, tmp_path: Path) -> None:
    hook = {"warmdep-hook.pth": "import os; os.environ['WARM_HOOK'] = '1'\n"}
    repo, deps = repository(tmp_path), site(tmp_path, "deps", hook)
    run(runner, repo, deps, tmp_path / "first")
    assert warm_start.wait_until_ready(120)
    result, log = run(runner, repo, deps, tmp_path / "afresh")
    assert FORKED in log and f"{AFRESH}: {deps / 'warmdep-hook.pth'} runs code" in log, log[-3000:]
    assert result.exit_code == 1 and outcomes(tmp_path / "afresh") == {
        "test_state": "passed", "test_compiled": "passed", "test_fails": "failure"}, log[-3000:]


def test_what_could_change_the_warm_imports_is_found(tmp_path: Path) -> None:
    """Named like a module the warm interpreter imported or looked for, on a site directory or a directory a .pth
    adds; a .pth line that runs code, but an editable install's finder."""
    from suites.warm_install import shadowed

    deps = site(tmp_path, "deps", {"extra.pth": str(tmp_path / "added") + "\n"})
    (tmp_path / "added").mkdir()
    assert shadowed([str(deps)], {"torch", "sympy"}) == ""
    (tmp_path / "added" / "sympy").mkdir()
    assert "added/sympy is named like a module" in shadowed([str(deps)], {"torch", "sympy"})
    assert "warmdep is named like" in shadowed([str(deps)], {"warmdep"})
    finder = site(tmp_path, "finder", {"__editable__.warm-0.1.pth":
                                       "import __editable___warm_0_1_finder; __editable___warm_0_1_finder.install("
                                       "'/x/__editable___warm_0_1_finder.py')\n"})
    assert shadowed([str(finder)], {"torch"}) == ""
    hook = site(tmp_path, "hook", {"hook.pth": "import sys; sys.path.insert(0, '/elsewhere')\n"})
    assert "runs code" in shadowed([str(hook)], {"torch"})
