"""Finished (or running) jobs written straight into a store and an artifact directory, as the pipeline leaves
them: results, per-test artifacts (generated code, metrics, repro), a coloured log. Shared by the browser tests
and bench/job_page.py."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from service.config import Settings
from service.store import Job, NewRun, Run, Store, TestRecord, utcnow
from suites.naming import sanitise_nodeid
from tests.rows import force_run

GENERATED_CODE = '''# AOT ID: ['0_inference']
from torch._inductor.codecache import AsyncCompile
async_compile = AsyncCompile()

cpp_fused_relu_0 = async_compile.cpp_pybinding(['const float*', 'float*'], \'\'\'
extern "C" void kernel(const float* in_ptr0, float* out_ptr0) {
    for (long x0 = 0; x0 < 64; x0 += 1) { out_ptr0[x0] = std::max(in_ptr0[x0], 0.0f); }  // <b>not bold</b>
}
\'\'\')

def call(args):
    arg0_1, = args
    buf0 = empty_strided_cpu((8, 8), (8, 1), torch.float32)
    cpp_fused_relu_0(arg0_1, buf0)
    return (buf0, )
'''


@dataclass(frozen=True)
class SeededTest:
    nodeid: str
    outcome: str = "passed"
    duration_s: float = 0.25
    compile_time_s: float = 0.5
    graphs: int = 1


def seed_run(store: Store, *, repo: str = "octo/zoo", pr: int | None = 7, sha: str = "a" * 40, private: bool = False,
             branch: str = "feature", age_minutes: int = 0) -> Run:
    trigger_ref = f"pr/{pr}" if pr is not None else f"refs/heads/{branch}"
    run, _ = store.create_run_if_absent(NewRun(
        repo_full_name=repo, repo_id=1, installation_id=2, clone_url="file:///nowhere", private=private,
        trigger="pull_request" if pr is not None else "push", trigger_ref=trigger_ref, pr_number=pr,
        branch=branch, head_sha=sha, sender="octocat"))
    force_run(store, run.id, state="planned", created_at=utcnow() - timedelta(minutes=age_minutes))
    return store.get_run(run.id) or run


def seed_job(settings: Settings, store: Store, run: Run, tests: list[SeededTest], *, log_bytes: int = 0,
             state: str = "completed", suite: str = "correctness", device: str = "cpu") -> Job:
    failed = sum(t.outcome == "failed" for t in tests)
    passed = sum(t.outcome == "passed" for t in tests)
    started = utcnow() - timedelta(seconds=90)
    job = Job(id=f"{run.id}-{suite}-{device}", run_id=run.id, suite=suite, device=device, timeout_s=600, attempt=1,
              state=state, conclusion=("failure" if failed else "success") if state == "completed" else None,
              passed=passed, failed=failed, skipped=0, errors=0, title=f"{failed} failed, {passed} passed, 0 skipped",
              runner="local", torch_version="2.13.0", started_at=started,
              finished_at=started + timedelta(seconds=83.4) if state == "completed" else None)
    store.add_jobs_if_absent([job])
    out = settings.artifacts_dir / run.id / job.id / "1"
    out.mkdir(parents=True, exist_ok=True)
    write_log(out / "log.txt", log_bytes)
    records = []
    for test in tests:
        folder = out / "tests" / sanitise_nodeid(test.nodeid)
        folder.mkdir(parents=True, exist_ok=True)
        for index in range(test.graphs):
            (folder / f"output_code_{index}.py").write_text(GENERATED_CODE.replace("relu_0", f"relu_{index}"))
        metrics = {"nodeid": test.nodeid, "outcome": test.outcome, "duration_s": test.duration_s,
                   "output_code_files": test.graphs, "graphs": test.graphs, "graph_breaks": 0, "recompiles": 0,
                   "compile_time_s": test.compile_time_s, "kernels_generated": test.graphs}
        (folder / "metrics.json").write_text(json.dumps(metrics, indent=2))
        details = ""
        if test.outcome == "failed":
            (folder / "repro.py").write_text(f'"""Reproduce {test.nodeid}."""\nimport pytest\n'
                                             f'pytest.main([{test.nodeid!r}])\n')
            details = (f"def {test.nodeid.split('::')[-1].split('[')[0]}():\n>       assert_close(compiled, eager)\n"
                       "E       AssertionError: compiled result differs from eager beyond tolerance:\n"
                       "E       max abs diff 0.5 at index (0, 3)\n")
        records.append(TestRecord(nodeid=test.nodeid, outcome=test.outcome, duration_s=test.duration_s,
                                  message="compiled result differs from eager" if details else "", details=details,
                                  metrics=metrics))  # the pipeline stores them at job end
    store.replace_results(job.id, 1, records)
    store.replace_artifacts(job.id, 1, [(p.relative_to(out).as_posix(), p.stat().st_size)
                                        for p in sorted(out.rglob("*")) if p.is_file()])
    return store.get_job(job.id) or job


def write_log(path: Path, size: int, times: bool = True) -> None:
    """A pytest-like log with ANSI colours, `size` bytes (written in 1 MiB blocks, so 50 MB takes no time), and the
    worker's times beside it (a write every 4 KiB, 100 ms apart: a job printing fast)."""
    from runners.job_log import TIME_RECORD, TIMES_NAME

    if times:
        path.with_name(TIMES_NAME).write_bytes(b"".join(
            TIME_RECORD.pack(offset, 1_767_323_045_000 + offset // 4096 * 100) for offset in range(0, size, 4096)))
    head = "\x1b[1m============ test session starts ============\x1b[0m\ncollecting ... collected 2000 items\n"
    line = "correctness/test_correctness.py::test_case[{:06d}] \x1b[32mPASSED\x1b[0m {:>3d}%\n"
    block = "".join(line.format(i, i % 100) for i in range(12_000)).encode()
    with open(path, "wb") as handle:
        handle.write(head.encode())
        written = len(head)
        while written < size:
            piece = block[: size - written]
            handle.write(piece)
            written += len(piece)
        handle.write(b"\x1b[31m\x1b[1mFAILED\x1b[0m correctness/test_correctness.py::test_case[000007]\n")


def many_tests(count: int, failing_every: int = 100) -> list[SeededTest]:
    return [SeededTest(f"correctness/test_correctness.py::test_case[{i:06d}]",
                       "failed" if i % failing_every == 7 else "passed", 0.1 + (i % 13) / 10, 0.3 + (i % 7) / 10)
            for i in range(count)]


def write_job_log(out: Path, started_ms: int, tests: int = 40, failing: int = 7) -> list[str]:
    """A job's log as the worker leaves it (log.txt and its log.times sidecar): the command, the install, collect,
    test and results sections the install step and the suites' plugin mark, each test's id as it ran. Times: the
    install takes 12 s, collection 3 s, each test 1 s. Returns the lines."""
    from runners.job_log import TimeStamps

    timed: list[tuple[float, str]] = [
        (0.0, "$ python -m pytest -v -p no:cacheprovider -p suites.plugin correctness"),
        (0.5, "::group::Install the repository (pip install -e . --no-deps --no-index)"),
        (0.6, "Obtaining file:///tmp/compile-ci-src"), (11.9, "Successfully installed widgets-0.1"),
        (12.0, "::endgroup::"), (12.0, "::group::Collect tests"),
        (12.1, f"\x1b[1m{_rule('test session starts')}\x1b[0m"),
        (12.1, "platform linux -- Python 3.11.2, pytest-8.3.4"), (15.0, f"collecting ... collected {tests} items"),
        (15.0, "::group::Run tests"),
    ]
    for i in range(tests):
        outcome = "\x1b[31mFAILED\x1b[0m" if i == failing else "\x1b[32mPASSED\x1b[0m"
        percent = (i + 1) * 100 // tests
        timed.append((15.0 + i, f"correctness/test_correctness.py::test_case[{i}] {outcome} [{percent:3d}%]"))
    end = 15.0 + tests
    timed += [(end, "::group::Results"), (end, _rule("FAILURES")),
              (end, f"____ test_case[{failing}] ____"), (end, "E       AssertionError: compiled result differs"),
              (end, _rule("warnings summary")), *[(end, f"DeprecationWarning {i}") for i in range(30)],
              (end, _rule("short test summary info")),
              (end, f"FAILED correctness/test_correctness.py::test_case[{failing}] - AssertionError"),
              (end + 0.4, _rule(f"1 failed, {tests - 1} passed in {tests}.00s"))]
    stamps = TimeStamps(out / "log.txt")
    with open(out / "log.txt", "wb") as log:
        for seconds, line in timed:
            stamps.stamp(log.tell(), started_ms + int(seconds * 1000))
            log.write(line.encode() + b"\n")
    stamps.close()
    return [line for _seconds, line in timed]


def _rule(title: str) -> str:
    return f" {title} ".center(80, "=")
