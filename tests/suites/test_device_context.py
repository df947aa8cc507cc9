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
    body = ["import gpukit", "import os", "from pathlib import Path", "",
            "def parent():  # this process's parent, and whether it holds torch's library",
            "    maps = Path(f'/proc/{os.getppid()}/maps').read_text()",
            "    return f'{os.getppid()} {int(\"libtorch\" in maps)}'", ""]
    for name in names:
        body += [f"def {name}():",
                 f"    Path(os.environ['COMPILE_CI_OUTPUT_DIR'], 'pid-{name}').write_text(str(gpukit.launch("
                 f"trap={name in traps})))",
                 f"    Path(os.environ['COMPILE_CI_OUTPUT_DIR'], 'parent-{name}').write_text(parent())",
                 f"    assert {name not in failing}, 'a wrong result'", ""]
    (root / "tests" / "test_kernels.py").write_text("\n".join(body))
    return root


def _run(tmp_path: Path, traps: set[str], names: list[str], failing: set[str] = frozenset(),
         env: dict[str, str] | None = None) -> RepoRun:
    checkout = _repo(tmp_path / "repo", traps, names, failing)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    run = run_repo_tests(checkout, tmp_path / "work",
                         extra_env={"PYTHONPATH": str(checkout), "TMPDIR": str(scratch), **(env or {})})
    left = [p.name for p in scratch.iterdir() if p.name.startswith("compile-ci-continue-")]
    assert not left, f"the continuation's scratch stayed behind: {left}"
    return run


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
    # The process that lost its device is gone before the next starts: it became (exec, the same pid) the driver,
    # which holds no torch, so its memory and device context are not kept beside the fresh process's.
    driver, driver_holds_torch = (run.out / "parent-test_after").read_text().split()
    assert driver == _pid(run, "test_traps") and driver_holds_torch == "0"
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


def test_a_shard_that_takes_its_tests_goes_on_taking_them_after_a_trap(tmp_path: Path, redis_url: str) -> None:
    """A first push's shard takes its tests while it runs (suites/claiming.py). When a test traps, the fresh process
    runs the tests its shard had taken and left, then goes on taking (its requests numbered after the lost process's,
    answered by the same counter): every test judged once, and the shard says it took every one. Traps drawn at
    random, seeded and printed."""
    import os
    import subprocess
    import sys
    import xml.etree.ElementTree as ET

    from runners.grants import GrantChannel, GrantTap
    from service.jobs.shard_merge import untaken_of
    from service.planning.selection import read_selection, shard_env
    from service.store.claims import Claims
    from suites.shard_plan import GRANTS_ENV

    from .suite_run import _JOB_VARIABLES, REPO

    seed = random.randrange(2**32)
    print(f"seed {seed}")
    names = [f"test_{i}" for i in range(6)]
    draw = random.Random(seed)
    traps = {"test_1"} | {name for name in names[2:] if draw.random() < 0.25}
    checkout = _repo(tmp_path / "repo", traps, names)
    work, grants, scratch = tmp_path / "work", tmp_path / "grants", tmp_path / "tmp"
    for folder in (work, grants, scratch):
        folder.mkdir()
    out = work / "out"
    env = {key: value for key, value in os.environ.items() if key not in (*_JOB_VARIABLES, "COMPILE_CI_RERUNS")}
    env.update({"PYTHONPATH": os.pathsep.join([str(REPO), str(checkout)]), "TMPDIR": str(scratch),
                "COMPILE_CI_DEVICE": "cpu", "COMPILE_CI_CHECKOUT": str(checkout), "COMPILE_CI_OUTPUT_DIR": str(out),
                GRANTS_ENV: str(grants), **shard_env(0, 2, {}, dynamic=True)})
    claims = Claims(redis_url, 3600)
    printed = bytearray()
    tap = GrantTap(type("Log", (), {"write": lambda _self, chunk: printed.extend(chunk)})(),
                   GrantChannel(grants, lambda request, units: claims.grant_unit("job:1", 0, request, units)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "suites.pytest_entry", "-q", "-p", "no:cacheprovider", "-p", "suites.plugin", "-o",
         "junit_family=xunit1", f"--junitxml={out / 'junit.xml'}", "--rootdir", str(checkout), str(checkout / "tests")],
        cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    while chunk := proc.stdout.read1(4096):  # type: ignore[attr-defined]
        tap.write(chunk)
    proc.wait(timeout=300)
    # The job's JUnit file, which the continuation merged its tests into.
    cases = {case.get("name", ""): case for case in ET.parse(out / "junit.xml").getroot().iter("testcase")}
    run = RepoRun(proc.returncode, printed.decode(errors="replace"), out, cases)
    assert sorted(cases) == names, f"seed {seed}, traps {sorted(traps)}: {run.describe()}"
    for name in names:
        assert run.outcome(name) == ("failed" if name in traps else "passed"), f"seed {seed}: {name}"
    assert _pid(run, "test_0") == _pid(run, "test_1") != _pid(run, "test_5")
    selection = read_selection(out)
    assert sorted(n.split("::")[-1] for n in selection.taken or ()) == names and untaken_of([selection]) == ""


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


TRAP_PLUGIN = '''
"""Stand-in for a GPU kernel that traps: while a case named in TRAP_CASES runs (each once per run: a file marks it),
the process's device is lost until the process ends."""
import os
from pathlib import Path

from suites import device_context

LOST = []


def _probe():
    current = os.environ.get("PYTEST_CURRENT_TEST", "")
    for case in os.environ["TRAP_CASES"].split(","):
        marker = Path(os.environ["TRAP_MARKS"], case)
        if f"[{case}]" in current and not marker.exists():
            marker.write_text("trapped")
            LOST.append(f"FakeDeviceError: device-side assert triggered in {case}")
    return LOST[0] if LOST else None


device_context.PROBES.append(_probe)
'''


def test_the_op_sweep_turns_a_trap_into_a_verdict_and_judges_the_cases_after_it(tmp_path: Path) -> None:
    """The op sweep on a repository whose compiler patch (special_points) changes sign and nan_to_num: a trap while
    compiling sign's samples is that case's failure, named as a trap with its samples; one in abs (a stock-torch op
    the repository does not change) is upstream's, an expected failure; the cases after each are judged in a fresh
    process: nan_to_num fails on its plant, reciprocal's int64 case passes."""
    import json
    import os
    import subprocess
    import sys
    import xml.etree.ElementTree as ET

    from .suite_run import _JOB_VARIABLES, REPO

    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "trap_plugin.py").write_text(TRAP_PLUGIN)
    (tmp_path / "marks").mkdir()
    out = tmp_path / "out"
    env = {key: value for key, value in os.environ.items() if key not in _JOB_VARIABLES}
    env.update({"PYTHONPATH": os.pathsep.join([str(REPO), str(tmp_path / "plugins")]), "COMPILE_CI_DEVICE": "cpu",
                "COMPILE_CI_OUTPUT_DIR": str(out), "COMPILE_CI_OPS_SCOPE": "all",
                "TRAP_CASES": "abs-float32,sign-float32", "TRAP_MARKS": str(tmp_path / "marks")})
    selection = " or ".join(f"[{case}]" for case in ("abs-float32", "sign-float32", "nan_to_num-float32",
                                                      "reciprocal-int64"))
    command = [sys.executable, "-m", "suites.pytest_entry", "-q", "-p", "no:cacheprovider", "-p", "suites.plugin",
               "-p", "tests.suites.planted.special_points", "-p", "trap_plugin", "-o", "junit_family=xunit1",
               f"--junitxml={out / 'junit.xml'}", str(REPO / "suites" / "ops"), "-k", selection]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1500)
    output = done.stdout + done.stderr
    log = output[-6000:]
    cases = {case.get("name"): case for case in ET.parse(out / "junit.xml").getroot().iter("testcase")}

    def outcome(name: str) -> tuple[str, str]:
        for child in cases[f"test_op_matches_eager[{name}]"]:
            if child.tag in ("failure", "error", "skipped"):
                kind = "xfailed" if child.get("type") == "pytest.xfail" else child.tag
                return kind, child.get("message", "") + (child.text or "")
        return "passed", ""

    assert sorted(os.listdir(tmp_path / "marks")) == ["abs-float32", "sign-float32"], log
    kind, message = outcome("sign-float32")
    assert kind == "failure" and "trapped on cpu: FakeDeviceError" in message, (kind, message, log)
    assert "compiled into one graph" in message and "not judged" in message
    kind, message = outcome("abs-float32")
    assert kind == "xfailed" and "traps on stock torch" in message, (kind, message, log)
    assert outcome("nan_to_num-float32")[0] == "failure", log  # its plant, judged after the trap
    assert "inputs there: input = -inf" in outcome("nan_to_num-float32")[1]
    assert outcome("reciprocal-int64")[0] == "passed", outcome("reciprocal-int64")
    assert output.count("compile-ci: the device's context was lost in") == 2, log
    assert done.returncode == 1
    assert json.loads((out / "coverage.json").read_text())["format"] == 1  # the last part's, with the earlier ones'


def test_a_continuation_keeps_the_op_families_the_earlier_process_recorded(tmp_path: Path) -> None:
    """coverage.json is written at a session's end: the fresh process starts from the earlier one's file."""
    import json

    from suites.coverage import CoverageRecorder

    earlier = tmp_path / "coverage.json"
    earlier.write_text(json.dumps({"format": 1, "cache_hits": 2, "per_test": {"t::a": {"lowered": ["aten.add"]}}}))
    recorder = CoverageRecorder()
    recorder.take_earlier(earlier)
    recorder.per_test.setdefault("t::b", {}).setdefault("lowered", set()).add("aten.mul")
    report = recorder.report("cpu")
    assert report["per_test"] == {"t::a": {"lowered": ["aten.add"]}, "t::b": {"lowered": ["aten.mul"]}}
    assert report["cache_hits"] >= 2
    for junk in ("[1, 2]", "not json", json.dumps({"per_test": {"t::c": 5}})):  # the job's own file, any shape
        earlier.write_text(junk)
        fresh = CoverageRecorder()
        fresh.take_earlier(earlier)
        assert fresh.report("cpu")["per_test"] == {}


def test_merging_survives_a_first_process_that_left_no_or_a_broken_junit_file(tmp_path: Path) -> None:
    """The first process can die in pytest itself (its file missing) or a test can overwrite it: the driver keeps
    what it can and never stops on it (the service refuses a file that is not pytest's, as for any job)."""
    import xml.etree.ElementTree as ET

    from suites import continuation

    part = tmp_path / "part.xml"
    part.write_text('<testsuites><testsuite tests="1" failures="0" errors="0" skipped="0" time="1">'
                    '<testcase classname="t" name="a" file="t.py"/></testsuite></testsuites>')
    missing = tmp_path / "missing.xml"
    continuation._merge(missing, part)
    assert [c.get("name") for c in ET.parse(missing).getroot().iter("testcase")] == ["a"]
    broken = tmp_path / "broken.xml"
    broken.write_text("<not junit")
    continuation._merge(broken, part)
    assert broken.read_text() == "<not junit"
    none = tmp_path / "none.xml"
    continuation._add_not_run(none, ["tests/t.py::TestK::b"], "not run: why")
    case = next(ET.parse(none).getroot().iter("testcase"))
    assert (case.get("classname"), case.get("name"), case.find("error").get("message")) == \
        ("tests.t.TestK", "b", "not run: why")
