"""The job's entry side of suites/device_context.py: the tests a lost device context left run in fresh processes.

``run(first, before_exec)`` runs the job's pytest (``first``: the in-process session). When that session lost its
device with tests left, the process replaces itself (``exec``, the same pid for the runner) with ``drive``, which
holds no torch: while a session reports that it lost its device with tests left, it runs those tests in a new
``python -m suites.pytest_entry`` with the same arguments but its own JUnit file, then merges that file's test cases
into the job's. The exit status is the job's as one session
would have had it: 1 when any test of any part failed. Where the parts run out (``MAX_PROCESSES``, or the job's
deadline near), the tests not run are written to the JUnit file as errors that say why: never silently missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

from suites.device_context import CONTINUE_FILE_ENV, CONTINUE_ONLY_ENV, MAX_PROCESSES

DEADLINE_ENV = "COMPILE_CI_DEADLINE"
SPARE_S = 30  # a new process is not started this close to the job's deadline: it could not import torch


def junit_path(args: list[str]) -> Path | None:
    for index, arg in enumerate(args):
        for option in ("--junitxml", "--junit-xml"):
            if arg.startswith(option + "="):
                return Path(arg.split("=", 1)[1])
            if arg == option and index + 1 < len(args):
                return Path(args[index + 1])
    return None


def _with_junit(args: list[str], path: Path) -> list[str]:
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in ("--junitxml", "--junit-xml"):
            skip = True
            continue
        if not arg.startswith(("--junitxml=", "--junit-xml=")):
            out.append(arg)
    return [*out, f"--junitxml={path}"]


def run(first: Callable[[], int], before_exec: Callable[[], None]) -> int:
    """``first``, the job's in-process session. Where it lost its device with tests left, this process becomes the
    driver: ``before_exec`` (a normal exit's visible effects), then an ``exec`` of ``python -m suites.continuation``,
    so the lost process's memory and its device context are given back before any new process starts (a new
    process beside it on the same GPU could run out of memory)."""
    if os.environ.get(CONTINUE_ONLY_ENV):  # a continuation itself: the driver is the job's first process
        return first()
    scratch = Path(tempfile.mkdtemp(prefix="compile-ci-continue-"))
    stop_file = scratch / "left-0.json"
    os.environ[CONTINUE_FILE_ENV] = str(stop_file)
    status = first()
    if not stop_file.is_file():
        shutil.rmtree(scratch, ignore_errors=True)
        return status
    state = scratch / "state.json"
    state.write_text(json.dumps({"status": status, "args": sys.argv[1:], "scratch": str(scratch)}))
    before_exec()
    os.execv(sys.executable, [sys.executable, "-m", "suites.continuation", str(state)])
    raise AssertionError("unreachable")  # pragma: no cover


def drive(state_file: Path) -> int:
    state = json.loads(state_file.read_text())
    status, args, scratch = int(state["status"]), [str(a) for a in state["args"]], Path(state["scratch"])
    junit = junit_path(args)
    failed = status == 1
    part = 0
    stop_file = scratch / "left-0.json"
    while stop_file.is_file():
        left_info = json.loads(stop_file.read_text())
        failed = failed or bool(left_info.get("failed"))
        left = [str(nodeid) for nodeid in left_info["left"]]
        part += 1
        deadline = _deadline()
        if part >= MAX_PROCESSES or (deadline is not None and time.time() > deadline - SPARE_S):
            why = (f"not run: the device's context was lost {part} times in this job ({left_info.get('error')}), "
                   f"last in {left_info.get('after')}; no more processes were started")
            print(f"compile-ci: {why}: {len(left)} tests", flush=True)
            if junit is not None:
                _add_not_run(junit, left, why)
            shutil.rmtree(scratch, ignore_errors=True)
            return 1
        print(f"compile-ci: the device's context was lost in {left_info.get('after')} ({left_info.get('error')}); "
              f"the {len(left)} tests after it run in a fresh process ({part + 1} of at most {MAX_PROCESSES})",
              flush=True)
        only = scratch / f"only-{part}.json"
        only.write_text(json.dumps(left))
        stop_file = scratch / f"left-{part}.json"
        part_junit = scratch / f"junit-{part}.xml"
        env = {**os.environ, CONTINUE_ONLY_ENV: str(only), CONTINUE_FILE_ENV: str(stop_file)}
        command = [sys.executable, "-m", "suites.pytest_entry",
                   *(_with_junit(args, part_junit) if junit is not None else args)]
        status = subprocess.run(command, env=env, check=False).returncode
        failed = failed or status == 1
        if junit is not None and part_junit.is_file():
            _merge(junit, part_junit)
    shutil.rmtree(scratch, ignore_errors=True)
    return 1 if failed else status


def _deadline() -> float | None:
    try:
        return float(os.environ[DEADLINE_ENV])
    except (KeyError, ValueError):
        return None


def _suite(path: Path) -> tuple[ET.ElementTree, ET.Element]:
    tree = ET.parse(path)
    root = tree.getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        suite = ET.SubElement(root, "testsuite", name="pytest")
    return tree, suite


def _count(suite: ET.Element, name: str, add: float) -> None:
    value = float(suite.get(name, "0") or 0) + add
    suite.set(name, f"{value:.3f}" if name == "time" else str(int(value)))


def _merge(into: Path, part: Path) -> None:
    """The part's cases joined to the job's file; where the first process wrote none (it died in pytest itself), the
    part's file is the job's; a file neither process wrote as pytest does is left for the service to refuse."""
    if not into.is_file():
        shutil.copyfile(part, into)
        return
    try:
        tree, suite = _suite(into)
        _, other = _suite(part)
    except (ET.ParseError, OSError) as exc:
        print(f"compile-ci: the JUnit files could not be merged ({exc}); {part.name} is not in the job's", flush=True)
        return
    for name in ("tests", "failures", "errors", "skipped", "time"):
        _count(suite, name, float(other.get(name, "0") or 0))
    for case in other.findall("testcase"):
        suite.append(case)
    _write(tree, into)


def _add_not_run(into: Path, nodeids: list[str], why: str) -> None:
    if not into.is_file():
        into.write_text('<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="0" '
                        'errors="0" failures="0" skipped="0" time="0"/></testsuites>')
    try:
        tree, suite = _suite(into)
    except (ET.ParseError, OSError) as exc:
        print(f"compile-ci: the tests not run could not be written to the JUnit file ({exc})", flush=True)
        return
    for nodeid in nodeids:
        file, *inner = nodeid.split("::")
        classname = ".".join([file.removesuffix(".py").replace("/", "."), *inner[:-1]])
        case = ET.SubElement(suite, "testcase", classname=classname, name=inner[-1] if inner else nodeid,
                             file=file, time="0")
        ET.SubElement(case, "error", message=why[:500]).text = why
    _count(suite, "tests", len(nodeids))
    _count(suite, "errors", len(nodeids))
    _write(tree, into)


def _write(tree: ET.ElementTree, path: Path) -> None:
    temporary = path.with_name(path.name + ".tmp")
    tree.write(temporary, encoding="utf-8", xml_declaration=True)
    temporary.replace(path)


if __name__ == "__main__":
    sys.exit(drive(Path(sys.argv[1])))
