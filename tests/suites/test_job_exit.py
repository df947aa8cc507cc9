"""A job's process kills its compile workers instead of waiting for them and leaves none (suites/compile_workers.py).

The runner's test file starts inductor's compile-worker pool as a CUDA job's first compile does (this host's CPU
torch has no triton, so its compiles never start one) and writes down the sidecar's pid and its workers' pids, as the
kernel lists them, before the job's process ends through `suites.pytest_entry`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from suites import compile_workers

REPO = Path(__file__).resolve().parents[2]

STARTS_THE_POOL = '''
import json, os
from pathlib import Path

from suites import compile_workers
from torch._inductor import async_compile

def test_compiles_with_the_pool():
    compile_ = async_compile.AsyncCompile
    compile_.warm_pool(); compile_.wakeup(); compile_.wait_pool_ready()
    (pool,) = list(async_compile._pool_set)
    sidecar = pool.process.pid
    workers = [int(pid) for task in Path(f"/proc/{sidecar}/task").iterdir()
               for pid in (task / "children").read_text().split()]
    assert workers
    Path(os.environ["POOL_PIDS"]).write_text(json.dumps([sidecar, *workers]))
'''


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_a_jobs_compile_workers_are_killed_at_its_end_and_its_outcome_is_kept(tmp_path: Path) -> None:
    (tmp_path / "test_pool.py").write_text(STARTS_THE_POOL)
    (tmp_path / "out").mkdir()
    pids_file, junit = tmp_path / "pids.json", tmp_path / "junit.xml"
    env = {**os.environ, "PYTHONPATH": str(REPO), "COMPILE_CI_OUTPUT_DIR": str(tmp_path / "out"),
           "TORCHINDUCTOR_COMPILE_THREADS": "2", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "POOL_PIDS": str(pids_file)}
    env.pop("PYTEST_ADDOPTS", None)
    # Its own session, and no group kill after it: what is left running is what the job left.
    done = subprocess.run([sys.executable, "-m", "suites.pytest_entry", "test_pool.py", "-q", "-p", "no:cacheprovider",
                           f"--junitxml={junit}"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300, start_new_session=True)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    cases = list(ET.parse(junit).getroot().iter("testcase"))
    assert [case.get("name") for case in cases] == ["test_compiles_with_the_pool"] and not any(len(c) for c in cases)
    pids = json.loads(pids_file.read_text())
    assert len(pids) == 3, pids  # the sidecar and its two workers
    assert [pid for pid in pids if _alive(pid)] == [], (pids, output)
    assert "unclean exit" not in output and "Traceback" not in output, output


def test_a_process_s_children_are_found_with_and_without_the_kernel_s_list() -> None:
    # Two children, one of them named with a space and a parenthesis as a comm may be: its stat line's second field
    # ends at the last ")". The kernel's per-thread lists and the scan of /proc agree.
    parent = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys, time\n"
        "kids = [subprocess.Popen(['sleep', '60']), subprocess.Popen([sys.executable, '-c', "
        "'import ctypes, time; ctypes.CDLL(None).prctl(15, b\"a) b (c\", 0, 0, 0); time.sleep(60)'])]\n"
        "print(' '.join(str(k.pid) for k in kids), flush=True)\n"
        "time.sleep(60)\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        kids = sorted(int(pid) for pid in parent.stdout.readline().split())
        assert len(kids) == 2
        deadline = time.monotonic() + 30
        while not any(Path(f"/proc/{pid}/comm").read_text() == "a) b (c\n" for pid in kids):
            assert time.monotonic() < deadline, "the child never took its name"
        assert compile_workers.children(parent.pid) == kids
        assert sorted(compile_workers.scan(parent.pid)) == kids
    finally:
        for pid in compile_workers.scan(parent.pid):
            os.kill(pid, 9)
        parent.kill()
        parent.wait()
