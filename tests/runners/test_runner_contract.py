"""The runner contract, run against every runner available here (LocalRunner; DockerRunner joins later)."""

from __future__ import annotations

import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from runners.local import LocalRunner
from runners.protocol import Runner, RunSpec

RUNNERS: dict[str, Callable[[], Runner]] = {"local": LocalRunner}


@pytest.fixture(params=sorted(RUNNERS))
def runner(request: pytest.FixtureRequest) -> Runner:
    return RUNNERS[request.param]()


def spec_for(tmp_path: Path, code: str, timeout_s: float = 60, env: dict[str, str] | None = None) -> RunSpec:
    checkout = tmp_path / "checkout"
    checkout.mkdir(exist_ok=True)
    (checkout / "job.py").write_text(textwrap.dedent(code))
    return RunSpec(job_id="job-1", command=(sys.executable, str(checkout / "job.py")), checkout_dir=checkout,
                   output_dir=tmp_path / "out", timeout_s=timeout_s, env=env or {"COMPILE_CI_DEVICE": "cpu"})


def test_exit_code_and_output_reach_the_log(runner: Runner, tmp_path: Path) -> None:
    result = runner.run(spec_for(tmp_path, "import sys; print('hello from the job'); sys.exit(3)"))
    assert (result.exit_code, result.timed_out, result.infra_error) == (3, False, None)
    assert "hello from the job" in (tmp_path / "out" / "log.txt").read_text()


def test_artifacts_written_by_the_job_are_kept(runner: Runner, tmp_path: Path) -> None:
    code = """
        import os, pathlib
        out = pathlib.Path(os.environ["COMPILE_CI_OUTPUT_DIR"])
        (out / "tests").mkdir()
        (out / "tests" / "output_code.py").write_text("# generated")
    """
    spec = spec_for(tmp_path, code)
    spec = RunSpec(**{**spec.__dict__, "env": {"COMPILE_CI_OUTPUT_DIR": str(spec.output_dir)}})
    assert runner.run(spec).exit_code == 0
    assert (tmp_path / "out" / "tests" / "output_code.py").read_text() == "# generated"


def test_timeout_kills_the_job_and_everything_it_spawned(runner: Runner, tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    code = f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open({str(pid_file)!r}, "w").write(str(child.pid))
        print("started", flush=True)
        time.sleep(600)
    """
    started = time.monotonic()
    result = runner.run(spec_for(tmp_path, code, timeout_s=3))
    assert result.timed_out
    assert time.monotonic() - started < 20
    assert not _alive(int(pid_file.read_text()))


def _alive(pid: int) -> bool:
    """Running or sleeping; a zombie (killed, waiting for init to reap it) counts as dead."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def test_cancellation_stops_the_job(runner: Runner, tmp_path: Path) -> None:
    result = runner.run(spec_for(tmp_path, "import time; time.sleep(600)"), should_cancel=lambda: True)
    assert result.cancelled and not result.timed_out


def test_no_secret_of_the_worker_reaches_the_job(runner: Runner, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPILE_CI_WEBHOOK_SECRET", "super-secret-hook")
    monkeypatch.setenv("COMPILE_CI_GITHUB_PRIVATE_KEY", "-----BEGIN PRIVATE KEY-----")
    monkeypatch.setenv("GITHUB_TOKEN", "ghs_leak")
    code = "import os; print('\\n'.join(f'{k}={v}' for k, v in os.environ.items()))"
    assert runner.run(spec_for(tmp_path, code)).exit_code == 0
    log = (tmp_path / "out" / "log.txt").read_text()
    assert "COMPILE_CI_DEVICE=cpu" in log
    for leaked in ("super-secret-hook", "BEGIN PRIVATE KEY", "ghs_leak"):
        assert leaked not in log


def test_a_command_that_cannot_start_is_an_infrastructure_error(runner: Runner, tmp_path: Path) -> None:
    spec = spec_for(tmp_path, "")
    spec = RunSpec(**{**spec.__dict__, "command": (str(tmp_path / "no-such-interpreter"),)})
    result = runner.run(spec)
    assert result.infra_error is not None and result.exit_code is None
