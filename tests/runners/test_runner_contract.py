"""The runner contract, run against every runner: LocalRunner and the DockerRunner (real engine, real image).

The isolation tests (network, read-only root, uid, memory limit, container removal) apply to the runners that
isolate the job; LocalRunner is for trusted hosts and makes no such promise.
"""

from __future__ import annotations

import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest

from runners.grants import GrantChannel
from runners.local import LocalRunner
from runners.protocol import Runner, RunSpec
from tests.runners.conftest import job_containers

# name -> fixture that yields the runner; the Docker one needs a real engine and the CPU runner image.
RUNNERS: dict[str, str] = {"local": "local_runner", "docker": "docker_runner"}
ISOLATING = ["docker"]


@pytest.fixture(params=ISOLATING)
def isolating_runner(request: pytest.FixtureRequest) -> Runner:
    return request.getfixturevalue(RUNNERS[request.param])


def spec_for(runner: Runner, tmp_path: Path, code: str, timeout_s: float = 60, **extra: object) -> RunSpec:
    """A job running `code` from its checkout, in the worker's paths (container runners map them)."""
    checkout = tmp_path / "checkout"
    checkout.mkdir(exist_ok=True)
    (checkout / "job.py").write_text(textwrap.dedent(code))
    out = tmp_path / "out"
    spec = RunSpec(job_id=f"job-{tmp_path.name}", command=(runner.python, str(checkout / "job.py")),
                   checkout_dir=checkout, output_dir=out, timeout_s=timeout_s,
                   env={"COMPILE_CI_DEVICE": "cpu", "COMPILE_CI_OUTPUT_DIR": str(out)})
    return replace(spec, **extra)


def log_of(tmp_path: Path) -> str:
    return (tmp_path / "out" / "log.txt").read_text()


def test_exit_code_and_output_reach_the_log(runner: Runner, tmp_path: Path) -> None:
    result = runner.run(spec_for(runner, tmp_path, "import sys; print('hello from the job'); sys.exit(3)"))
    assert (result.exit_code, result.timed_out, result.oom, result.infra_error) == (3, False, False, None)
    assert "hello from the job" in log_of(tmp_path)


def test_artifacts_written_by_the_job_are_kept(runner: Runner, tmp_path: Path) -> None:
    code = """
        import os, pathlib
        out = pathlib.Path(os.environ["COMPILE_CI_OUTPUT_DIR"])
        (out / "tests").mkdir()
        (out / "tests" / "output_code.py").write_text("# generated")
    """
    assert runner.run(spec_for(runner, tmp_path, code)).exit_code == 0
    assert (tmp_path / "out" / "tests" / "output_code.py").read_text() == "# generated"


def test_a_job_asks_for_its_tests_by_a_line_and_cannot_write_the_answers(runner: Runner, tmp_path: Path) -> None:
    """The channel of a shard that takes its tests while it runs (runners/grants.py): asked by what the job prints,
    answered in a directory the job can only read (a container's mount; LocalRunner is for trusted hosts)."""
    code = """
        import os, pathlib, time
        grants, got = pathlib.Path(os.environ["COMPILE_CI_GRANTS"]), []
        for request in range(4):
            os.write(1, f"\\ncompile-ci-claim {request} 3\\n".encode())
            deadline = time.time() + 30
            while not (grants / str(request)).exists() and time.time() < deadline:
                time.sleep(0.01)
            got.append((grants / str(request)).read_text())
        print("got", got, flush=True)
        try:
            (grants / "0").write_text("2")
            print("wrote an answer", flush=True)
        except OSError as exc:
            print("refused", type(exc).__name__, flush=True)
    """
    grants = tmp_path / "grants"
    grants.mkdir()
    channel = GrantChannel(grants, lambda request, units: request if request < units else -1)
    spec = spec_for(runner, tmp_path, code, grants=channel)
    result = runner.run(replace(spec, env={**spec.env, "COMPILE_CI_GRANTS": str(grants)}))
    assert result.exit_code == 0, log_of(tmp_path)
    assert "got ['0', '1', '2', '-1']" in log_of(tmp_path)
    if not isinstance(runner, LocalRunner):
        assert "refused OSError" in log_of(tmp_path) and (grants / "0").read_text() == "0"


def test_timeout_kills_the_job_and_everything_it_spawned(runner: Runner, tmp_path: Path) -> None:
    code = """
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open(os.path.join(os.environ["COMPILE_CI_OUTPUT_DIR"], "child.pid"), "w").write(str(child.pid))
        print("started", flush=True)
        time.sleep(600)
    """
    started = time.monotonic()
    result = runner.run(spec_for(runner, tmp_path, code, timeout_s=3))
    assert result.timed_out and not result.oom and result.infra_error is None
    assert time.monotonic() - started < 20
    assert "started" in log_of(tmp_path)
    if isinstance(runner, LocalRunner):
        assert not _alive(int((tmp_path / "out" / "child.pid").read_text()))
    else:  # the child's pid is the container's; nothing of it outlives the container, which is gone
        assert job_containers(runner) == []  # type: ignore[arg-type]


def _alive(pid: int) -> bool:
    """Running or sleeping; a zombie (killed, waiting for init to reap it) counts as dead."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def test_cancellation_stops_the_job(runner: Runner, tmp_path: Path) -> None:
    result = runner.run(spec_for(runner, tmp_path, "import time; time.sleep(600)"), should_cancel=lambda: True)
    assert result.cancelled and not result.timed_out


def test_no_secret_of_the_worker_reaches_the_job(runner: Runner, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPILE_CI_WEBHOOK_SECRET", "super-secret-hook")
    monkeypatch.setenv("COMPILE_CI_GITHUB_PRIVATE_KEY", "-----BEGIN PRIVATE KEY-----")
    monkeypatch.setenv("GITHUB_TOKEN", "ghs_leak")
    code = "import os; print('\\n'.join(f'{k}={v}' for k, v in os.environ.items()))"
    assert runner.run(spec_for(runner, tmp_path, code)).exit_code == 0
    log = log_of(tmp_path)
    assert "COMPILE_CI_DEVICE=cpu" in log
    for leaked in ("super-secret-hook", "BEGIN PRIVATE KEY", "ghs_leak", "DOCKER_HOST"):
        assert leaked not in log


def test_a_command_that_cannot_start_is_an_infrastructure_error(runner: Runner, tmp_path: Path) -> None:
    spec = spec_for(runner, tmp_path, "")
    result = runner.run(replace(spec, command=(str(tmp_path / "checkout" / "no-such-interpreter"),)))
    assert result.infra_error is not None and result.exit_code is None


# --- isolation: what PR code inside the job can and cannot do -----------------------------------------


def test_the_job_has_no_network(isolating_runner: Runner, tmp_path: Path) -> None:
    code = """
        import socket
        try:
            socket.create_connection(("1.1.1.1", 53), timeout=3)
        except OSError as exc:
            raise SystemExit(f"no network: {exc}")
        print("connected")
    """
    result = isolating_runner.run(spec_for(isolating_runner, tmp_path, code))
    assert result.exit_code == 1 and "no network" in log_of(tmp_path)


def test_root_filesystem_is_read_only_and_tmp_is_executable(isolating_runner: Runner, tmp_path: Path) -> None:
    code = """
        import os, stat, subprocess
        for path in ("/etc/compile-ci-was-here", "/opt/venv/evil.py", "/job/checkout/evil.py"):
            try:
                open(path, "w")
            except OSError as exc:
                print(f"refused {path}: {exc.strerror}")
        # inductor dlopen()s what it compiles under /tmp: the tmpfs there must allow exec.
        open("/tmp/hello.sh", "w").write("#!/bin/sh\\necho tmp-exec-ok\\n")
        os.chmod("/tmp/hello.sh", stat.S_IRWXU)
        subprocess.run(["/tmp/hello.sh"], check=True)
    """
    assert isolating_runner.run(spec_for(isolating_runner, tmp_path, code)).exit_code == 0
    log = log_of(tmp_path)
    assert log.count("refused") == 3 and "tmp-exec-ok" in log


def test_the_job_runs_as_an_unprivileged_user(isolating_runner: Runner, tmp_path: Path) -> None:
    code = """
        import os
        print("uid", os.getuid(), "gid", os.getgid())
        print("caps", open("/proc/self/status").read().split("CapEff:")[1].split()[0])
        print("nnp", open("/proc/self/status").read().split("NoNewPrivs:")[1].split()[0])
    """
    assert isolating_runner.run(spec_for(isolating_runner, tmp_path, code)).exit_code == 0
    log = log_of(tmp_path)
    assert "uid 0" not in log and "uid 10001" in log
    assert "caps 0000000000000000" in log and "nnp 1" in log


def test_exceeding_the_memory_limit_is_flagged_as_oom(isolating_runner: Runner, tmp_path: Path) -> None:
    code = """
        chunks = []
        while True:
            chunks.append(bytearray(16 * 1024 * 1024))
    """
    result = isolating_runner.run(spec_for(isolating_runner, tmp_path, code, memory_mb=128))
    assert result.oom and not result.timed_out and result.exit_code != 0


@pytest.mark.parametrize("outcome", ["success", "failure", "exception"])
def test_no_container_is_left_behind(docker_runner: Runner, tmp_path: Path, outcome: str) -> None:
    def explode() -> bool:
        raise RuntimeError("the worker broke mid-job")

    code = {"success": "pass", "failure": "raise SystemExit(1)", "exception": "import time; time.sleep(600)"}[outcome]
    spec = spec_for(docker_runner, tmp_path, code)
    if outcome == "exception":
        with pytest.raises(RuntimeError, match="mid-job"):
            docker_runner.run(spec, should_cancel=explode)
    else:
        assert docker_runner.run(spec).exit_code == {"success": 0, "failure": 1}[outcome]
    assert job_containers(docker_runner) == []  # type: ignore[arg-type]


def test_inductor_compiles_and_loads_cpp_inside_the_job(isolating_runner: Runner, tmp_path: Path) -> None:
    # The whole toolchain under the hardening: g++ with Python.h, objects written and dlopen()ed from /tmp.
    code = """
        import torch
        compiled = torch.compile(lambda x: (x.sin() + 1).sum())
        x = torch.randn(64)
        assert torch.allclose(compiled(x), (x.sin() + 1).sum())
        print("compiled ok")
    """
    result = isolating_runner.run(spec_for(isolating_runner, tmp_path, code, timeout_s=300))
    assert result.exit_code == 0, log_of(tmp_path)[-3000:]
    assert "compiled ok" in log_of(tmp_path)
