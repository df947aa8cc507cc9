"""A kernel that traps ends its process's use of the GPU, never the job's tests (suites/device_context.py).

On a GPU, a device-side assert leaves the process's CUDA context unusable: on the device host (2026-11-28) one such
assert in the op sweep made the 19 tests after it error at their setup, unjudged. The job now synchronises after each
test, charges the trap to the test that launched it, and runs the tests after it in a fresh process whose results
join the job's JUnit file. This host has no GPU: a sample repository's package stands in for one (a "kernel" that
traps marks the process's device as lost, until the process ends), through the probes list the CUDA probe is on.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

from .repo_run import RepoRun, run_repo_tests

PACKAGE = '''
"""A stand-in GPU library: a launch that traps leaves this process's device unusable, as a CUDA context is."""
import os

LOST = None


def launch(trap=False):
    global LOST
    if LOST:
        raise RuntimeError(f"device unusable: {LOST}")
    if trap:
        LOST = "FakeDeviceError: device-side assert triggered (index out of bounds)"
    return os.getpid()
'''

CONFTEST = '''
import gpukit
from suites import device_context

device_context.PROBES.append(lambda: gpukit.LOST)
'''


def _repo(root: Path, traps: set[str], names: list[str], failing: set[str] = frozenset()) -> Path:
    (root / "gpukit").mkdir(parents=True)
    (root / "gpukit" / "__init__.py").write_text(PACKAGE)
    (root / "tests").mkdir()
    (root / "tests" / "conftest.py").write_text(CONFTEST)
    body = ["import gpukit", "import os", "from pathlib import Path", ""]
    for name in names:
        body += [f"def {name}():",
                 f"    Path(os.environ['COMPILE_CI_OUTPUT_DIR'], 'pid-{name}').write_text(str(gpukit.launch("
                 f"trap={name in traps})))",
                 f"    assert {name not in failing}, 'a wrong result'", ""]
    (root / "tests" / "test_kernels.py").write_text("\n".join(body))
    return root


def _run(tmp_path: Path, traps: set[str], names: list[str], failing: set[str] = frozenset(),
         env: dict[str, str] | None = None) -> RepoRun:
    checkout = _repo(tmp_path / "repo", traps, names, failing)
    return run_repo_tests(checkout, tmp_path / "work", extra_env={"PYTHONPATH": str(checkout), **(env or {})})


def _pid(run: RepoRun, name: str) -> str:
    return (run.out / f"pid-{name}").read_text()


def test_tests_after_a_trap_run_in_a_fresh_process_and_join_the_jobs_results(tmp_path: Path) -> None:
    names = ["test_before", "test_traps", "test_after", "test_wrong_after", "test_last"]
    run = _run(tmp_path, {"test_traps"}, names, failing={"test_wrong_after"})
    assert sorted(run.cases) == sorted(names), run.describe()  # every test judged once, none lost or doubled
    assert run.outcome("test_before") == "passed"
    # Its own assertions passed, but a kernel it launched trapped: the trap is charged to it, with the device's words.
    assert run.outcome("test_traps") == "failed", run.describe()
    assert "device-side assert triggered" in run.cases["test_traps"].find("failure").get("message", "")
    # Judged, not errored at setup: in a process whose device works.
    assert run.outcome("test_after") == "passed", run.describe()
    assert run.outcome("test_wrong_after") == "failed"
    assert run.outcome("test_last") == "passed"
    assert _pid(run, "test_before") == _pid(run, "test_traps") != _pid(run, "test_after") == _pid(run, "test_last")
    assert run.returncode == 1  # as one session with two failing tests would end
    assert "the 3 tests after it run in a fresh process" in run.output
    suite = (run.out / "junit.xml").read_text()
    assert 'tests="5"' in suite and 'failures="2"' in suite, suite[:400]


def test_a_trap_in_the_last_test_needs_no_new_process(tmp_path: Path) -> None:
    run = _run(tmp_path, {"test_b"}, ["test_a", "test_b"])
    assert {name: run.outcome(name) for name in run.cases} == {"test_a": "passed", "test_b": "failed"}
    assert "fresh process" not in run.output
    assert run.returncode == 1


def test_no_time_left_for_a_new_process_reports_the_tests_left_as_not_run(tmp_path: Path) -> None:
    """Near the job's deadline no process is started; the tests it would have run are errors that say why."""
    names = ["test_a", "test_b", "test_c"]
    run = _run(tmp_path, {"test_a"}, names, env={"COMPILE_CI_DEADLINE": str(int(time.time()) + 5)})
    assert sorted(run.cases) == names, run.describe()
    assert run.outcome("test_a") == "failed"
    for name in ("test_b", "test_c"):
        assert run.outcome(name) == "error"
        assert "not run: the device's context was lost" in run.cases[name].find("error").get("message", "")
    assert run.returncode == 1


def test_any_set_of_traps_judges_every_test_once_in_its_own_order(tmp_path: Path) -> None:
    """The property, sampled: whichever tests trap, each test is reported once, in the order it was collected,
    trapping ones failed, every other passed, each ran in a process whose device had not been lost before it."""
    seed = random.randrange(2**32)
    print(f"seed {seed}")
    draw = random.Random(seed)
    names = [f"test_{i:02d}" for i in range(7)]
    traps = {name for name in names if draw.random() < 0.35}
    run = _run(tmp_path, traps, names)
    assert list(run.cases) == names, f"seed {seed}, traps {sorted(traps)}: {run.describe()}"
    for name in names:
        assert run.outcome(name) == ("failed" if name in traps else "passed"), f"seed {seed}: {name}"
    processes = [_pid(run, name) for name in names]
    for earlier, later, name in zip(processes, processes[1:], names, strict=False):
        assert (earlier != later) == (name in traps), f"seed {seed}: after {name}"


def test_the_job_entry_without_a_trap_is_one_process(tmp_path: Path) -> None:
    run = _run(tmp_path, set(), ["test_a", "test_b"])
    assert run.returncode == 0 and _pid(run, "test_a") == _pid(run, "test_b")
    assert "device's context" not in run.output
