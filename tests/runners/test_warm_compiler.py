"""A built-in suite's job forked from a warm interpreter that made the compiler's imports ahead (runners/warm_start.py,
suites/warm_compiler.py) is the job a fresh interpreter runs.

A sample repository (its own installable package, a dependency, a model and a patch that rebinds one of inductor's
functions, imported by the suite's tests) is run by a suite that lives outside it, as compile-ci's do, through the
LocalRunner: fresh, and forked behind its install step from the interpreter the runner started as it prepared (as a
worker does, for each device it serves). Both give the same outcomes, compiler fingerprint, generated code and op
families; in the forked job no module state holds a path of the warm interpreter's (the whole of it scanned), and
dynamo's package cache and inductor's header directory are the job's own. A job whose dependencies bring a pytest
plugin (it would run before the configure hooks) starts afresh after its install step, says why, and ends the same.
A cuda job forks from the interpreter prepared for its device, with its GPU and the variables every cuda job gets.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from runners import warm_start
from runners.compile_cache import UNTRUSTED, CacheScope
from runners.local import LocalRunner
from runners.protocol import RunResult, RunSpec
from service.jobs import install
from service.jobs.pipeline import pytest_command
from tests.runners.test_warm_install import PYPROJECT as WARM_INSTALL_PYPROJECT
from tests.runners.test_warm_start import MODEL, PATCH  # the same model and compiler patch

ROOT = Path(__file__).resolve().parents[2]
AHEAD = "forked from this host's warm interpreter (torch, pytest, dynamo and inductor imported once)"
PYPROJECT = WARM_INSTALL_PYPROJECT.replace("warminstall", "zoopkg")  # the same package, its own name
SUITE = '''
import json, os, sys

import torch


def test_state():
    import torch._dynamo.package as package
    import torch._inductor.codecache as codecache
    from suites import warm_compiler

    places, fixed = warm_compiler.scan("compile-ci-warm-")
    state = {"dynamo_cache": package.DynamoCache.path_prefix(), "header_dir": codecache._HEADER_DIR,
             "kept": [place.where for place in places] + fixed,
             "environ": sorted(k for k, v in os.environ.items() if "compile-ci-warm-" in v)}
    with open(os.path.join(os.environ["COMPILE_CI_OUTPUT_DIR"], "state.json"), "w") as handle:
        json.dump(state, handle)


def test_compiled_matches():
    sys.path.insert(0, os.environ["COMPILE_CI_CHECKOUT"])
    import zoopkg.patch  # noqa: F401 - the repository's compiler patch
    from zoopkg.model import double_sin

    x = torch.linspace(-2, 2, 32)
    torch.testing.assert_close(torch.compile(double_sin)(x), double_sin(x))


def test_wrong_expectation_fails():
    import zoodep
    from zoopkg.model import double_sin

    assert torch.compile(double_sin)(torch.ones(3)).sum().item() == zoodep.OFFSET
'''


@pytest.fixture
def runner() -> LocalRunner:
    warm_start.close_all()
    return LocalRunner(warm=True, gpus=("0",))


PLUGIN = {"zooplug.py": "import os\nos.environ['ZOO_PLUGGED'] = '1'\n",
          "zooplug-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: zooplug\nVersion: 1.0\n",
          "zooplug-1.0.dist-info/entry_points.txt": "[pytest11]\nzooplug = zooplug\n"}


def _deps(tmp_path: Path, name: str, files: dict[str, str]) -> Path:
    """A requirement's site directory, as the install phase prepares it."""
    root = tmp_path / name
    for path, text in {"zoodep/__init__.py": "OFFSET = 0\n",
                       "zoodep-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: zoodep\nVersion: 1.0\n",
                       **files}.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


def _run(runner: LocalRunner, tmp_path: Path, name: str, deps: Path) -> tuple[RunResult, Path]:
    repo, suite, out = tmp_path / "repo", tmp_path / "suite", tmp_path / name
    command = tuple(install.wrap([*pytest_command(runner.python, out / "junit.xml"), str(suite)], runner.python, repo,
                                 deps, True))
    return runner.run(_spec(tmp_path, name, command, "cpu", deps)), out


def _spec(tmp_path: Path, name: str, command: tuple[str, ...], device: str, deps: Path | None = None) -> RunSpec:
    repo, out = tmp_path / "repo", tmp_path / name
    env = {"COMPILE_CI_DEVICE": device, "COMPILE_CI_CHECKOUT": str(repo), "COMPILE_CI_OUTPUT_DIR": str(out),
           "COMPILE_CI_TARGETS": "{}", "COMPILE_CI_DEADLINE": str(int(time.time() + 600))}
    # A pull request's: each job compiles from an empty copy of the repository's cache (cold, in either order).
    cache = CacheScope(tmp_path / "cache", "zoo", UNTRUSTED, 7)
    return RunSpec(job_id=name, command=command, checkout_dir=repo, output_dir=out, timeout_s=600, device=device,
                   env=env, cache=cache, suites_dir=ROOT / "suites", deps_dir=deps)


def _seen(out: Path) -> dict[str, object]:
    import xml.etree.ElementTree as ET

    outcomes = {}
    for case in ET.parse(out / "junit.xml").getroot().iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        outcomes[case.get("name", "")] = kinds[0] if kinds else "passed"
    coverage = json.loads((out / "coverage.json").read_text())
    return {"outcomes": outcomes, "fingerprint": json.loads((out / "surface.json").read_text())["fingerprint"],
            "code": sorted(p.read_text() for p in (out / "tests").glob("*compiled_matches*/output_code_*.py")),
            "families": coverage["per_test"]}


def test_a_suites_job_forked_after_the_compilers_imports_is_the_fresh_job(runner: LocalRunner, tmp_path: Path) -> None:
    (tmp_path / "repo" / "zoopkg").mkdir(parents=True)
    (tmp_path / "repo" / "pyproject.toml").write_text(PYPROJECT)
    (tmp_path / "repo" / "zoopkg" / "__init__.py").write_text("")
    (tmp_path / "repo" / "zoopkg" / "model.py").write_text(MODEL)
    (tmp_path / "repo" / "zoopkg" / "patch.py").write_text(PATCH)
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "conftest.py").write_text('pytest_plugins = ("suites.coverage",)\n')  # as compile-ci's
    (tmp_path / "suite" / "test_zoo.py").write_text(SUITE)

    # A worker's preparation starts the interpreter its built-in suites' jobs take, on each device it serves
    # (runners/local.py's `prepare`), while a runner without warm starts runs the fresh job.
    runner.prepare(tmp_path / "cache", ("cpu", "cuda"))
    fresh, fresh_out = _run(LocalRunner(), tmp_path, "fresh", _deps(tmp_path, "deps", {}))
    assert warm_start.wait_until_ready(180)
    forked, forked_out = _run(runner, tmp_path, "forked", tmp_path / "deps")
    plugged, plugged_out = _run(runner, tmp_path, "plugged", _deps(tmp_path, "deps-plugin", PLUGIN))
    for result in (fresh, forked, plugged):
        assert result.exit_code == 1 and result.infra_error is None, result
    logs = {out.name: (out / "log.txt").read_text(errors="replace") for out in (fresh_out, forked_out, plugged_out)}
    assert AHEAD not in logs["fresh"] and AHEAD in logs["forked"], logs["forked"][:3000]
    assert "fresh interpreter" not in logs["forked"], logs["forked"][:3000]
    assert AHEAD in logs["plugged"] and "[compile-ci] the job starts a fresh interpreter: the installed pytest " \
           "plugins differ from the warm interpreter's" in logs["plugged"], logs["plugged"][:3000]
    assert any(line.startswith("plugins:") and "zooplug" in line for line in logs["plugged"].splitlines())

    seen = {out.name: _seen(out) for out in (fresh_out, forked_out, plugged_out)}
    assert seen["fresh"]["outcomes"] == {"test_state": "passed", "test_compiled_matches": "passed",
                                         "test_wrong_expectation_fails": "failure"}, seen["fresh"]
    assert seen["fresh"]["code"], "no generated code kept"
    for name in ("forked", "plugged"):
        for part in ("outcomes", "fingerprint", "code", "families"):
            assert seen[name][part] == seen["fresh"][part], (name, part)
    # The warm interpreter's directories are nowhere in the forked job: its paths are the job's.
    states = {name: json.loads((tmp_path / name / "state.json").read_text()) for name in ("fresh", "forked")}
    for name, state in states.items():
        assert state["kept"] == [] and state["environ"] == [], (name, state)
        assert state["dynamo_cache"].startswith(str(tmp_path / "cache")), (name, state)
        assert state["header_dir"].startswith(str(tmp_path / f"{name}.job" / "tmp")), (name, state)

    # The cuda job forks from the interpreter prepared for its device: its GPU and the variables every cuda job gets.
    (tmp_path / "cuda-suite").mkdir()
    (tmp_path / "cuda-suite" / "test_env.py").write_text(
        "import os\n\ndef test_env():\n    assert (os.environ['CUDA_VISIBLE_DEVICES'], "
        "os.environ['NCCL_NVLS_ENABLE']) == ('0', '0')\n")
    out = tmp_path / "cuda"
    command = (*pytest_command(runner.python, out / "junit.xml"), str(tmp_path / "cuda-suite"))
    result = runner.run(_spec(tmp_path, "cuda", command, "cuda"))
    log = (out / "log.txt").read_text(errors="replace")
    assert result.exit_code == 0 and AHEAD in log and "fresh interpreter" not in log, log[-3000:]

