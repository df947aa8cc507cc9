"""Per-test artifacts (loaded with `-p suites.plugin`): generated code, compile metrics and failure repros.

Writes `$COMPILE_CI_OUTPUT_DIR/tests/<sanitised node id>/`: `output_code_<n>.py` for every graph inductor compiled
(the wrapper with its C++ or Triton kernels), `metrics.json`, and `repro.py` when the test failed; and at the
session's end `$COMPILE_CI_OUTPUT_DIR/surface.json`, the compiler surface's fingerprint and the repository's changes
(suites/compiler_surface.py; format in suites/README.md).
Active for the built-in suites and for the repository's own tests alike; without the variable it does nothing.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from suites import compiler_surface, device_context, reruns, sharding
from suites.job_files import BackgroundFiles, ProgressWriter
from suites.log_sections import LogSections
from suites.naming import sanitise_nodeid
from suites.reruns import earlier_attempts

OUTPUT_ENV = "COMPILE_CI_OUTPUT_DIR"
SURFACE_FILE = "surface.json"  # the compiler fingerprint and what the repository changed (suites/README.md)
TARGET_PROPERTY = "compile_ci_target"
FORWARDED_ENV = ("COMPILE_CI_DEVICE", "COMPILE_CI_TARGETS", "COMPILE_CI_CHECKOUT")


if os.environ.get(OUTPUT_ENV):
    # Jobs take the baseline earlier still (suites/pytest_entry.py); here, for pytest started any other way with
    # this plugin: ahead of the `pytest11` entry points pytest loads after the command line's `-p`, and of every
    # conftest.py. Torch as torch defines it, so what the repository changes in its compiler keys the compile caches.
    compiler_surface.install()
    if os.environ.get("COMPILE_CI_BISECT_SECONDS"):  # what the bisection's suspect pair puts back
        from suites import bisect_session

        bisect_session.take_baseline()


def test_dir(output_dir: Path, nodeid: str) -> Path:
    return output_dir / "tests" / sanitise_nodeid(nodeid)


REPRO_TEMPLATE = '''"""Reproduce {nodeid} from a clone of the repository, on your machine.

    python repro.py [PATH_TO_CLONE] [--output-code] [--bisect]

PATH_TO_CLONE: the repository at the job's commit (default: the current directory). Needs torch (the job ran
{torch_version}), pytest{suites_hint} and the repository's [install] requirements: `compile-ci repro` with the
job's page sets all of that up. It re-runs exactly this test with the job's device, declared targets and torch
settings; --output-code also prints inductor's generated code (TORCH_LOGS=output_code), which the job's page shows;
--bisect (needs compile-ci's suites, which `compile-ci repro` puts on the path) bisects the test when it fails, as
the job did: torch's compiler bisector, judged by the test itself, and the repository's compiler changes taken out.
"""
import os
import sys

import pytest

OPTIONS = ("--output-code", "--bisect")
OUTPUT_CODE, BISECT = (option in sys.argv[1:] for option in OPTIONS)
PATHS = [arg for arg in sys.argv[1:] if arg not in OPTIONS]
CHECKOUT = os.path.abspath(PATHS[0] if PATHS else ".")
os.environ.update({env})
os.environ["COMPILE_CI_CHECKOUT"] = CHECKOUT
if OUTPUT_CODE:  # opt-in: hundreds of lines between the failure and pytest's summary
    os.environ["TORCH_LOGS"] = ",".join(filter(None, [os.environ.get("TORCH_LOGS"), "output_code"]))
if {is_suite!r}:  # a built-in suite: compile-ci's own test file, run against your clone's [targets]
    import suites

    BASE = os.path.dirname(os.path.dirname(os.path.abspath(suites.__file__)))
    ARGS = []
else:  # the repository's own test: as pytest would run it from the clone's root
    BASE = CHECKOUT
    ARGS = ["--rootdir", CHECKOUT]
    sys.path[:0] = [p for p in (CHECKOUT, os.path.join(CHECKOUT, "src")) if os.path.isdir(p)]
PLUGINS = []
if BISECT:  # an hour for it here (the job's was its budget); the baseline taken before the repository's code runs
    os.environ.setdefault("COMPILE_CI_BISECT_SECONDS", "3600")
    from suites import bisect_session

    bisect_session.take_baseline()
    PLUGINS.append(bisect_session)
sys.exit(pytest.main([os.path.join(BASE, {path!r}) + {rest!r}, *ARGS, "-p", "no:cacheprovider"], plugins=PLUGINS))
'''
# Torch settings of the job that change what a test does, carried into the repro. Not the job's own: its cache paths,
# and TORCHINDUCTOR_VEC_ISA_OK, which says the runner's toolchain passed runners/isa_check.py, not the reader's.
_TORCH_ENV_PREFIXES = ("TORCH", "TORCHINDUCTOR_", "TORCHDYNAMO_", "PYTORCH_")
_JOB_ONLY_ENV = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TORCHINDUCTOR_VEC_ISA_OK")


def _repro(item: pytest.Item) -> str:
    """A standalone script: no path of the job's machine, only paths relative to the clone or to the suites."""
    import torch

    env = {name: os.environ[name] for name in FORWARDED_ENV if name in os.environ and name != "COMPILE_CI_CHECKOUT"}
    env.update({k: v for k, v in os.environ.items() if k.startswith(_TORCH_ENV_PREFIXES) and k not in _JOB_ONLY_ENV})
    suites_root = Path(__file__).resolve().parent.parent
    path = Path(item.path).resolve()
    is_suite = path.is_relative_to(suites_root)
    base = suites_root if is_suite else Path(os.environ.get("COMPILE_CI_CHECKOUT") or item.config.rootpath).resolve()
    relative = str(path.relative_to(base)) if path.is_relative_to(base) else path.name
    rest = "".join("::" + part for part in item.nodeid.split("::")[1:])
    hint = " and compile-ci's suites (a compile-ci checkout on PYTHONPATH)" if is_suite else ""
    return REPRO_TEMPLATE.format(nodeid=item.nodeid, torch_version=torch.__version__, suites_hint=hint,
                                 env=json.dumps(env, indent=4, sort_keys=True), is_suite=is_suite,
                                 path=relative, rest=rest)


def target_location(item: pytest.Item) -> str | None:
    """`path:line` (relative to the checkout) of the declared target a test exercises: a pass or fused function
    before the model it runs on, for a failing pass test is about the pass."""
    checkout = os.environ.get("COMPILE_CI_CHECKOUT")
    values = list(getattr(item, "funcargs", {}).values())
    if not checkout:
        return None
    candidates = [v.fn for v in values if callable(getattr(v, "fn", None))]
    candidates += [v.factory for v in values if callable(getattr(v, "factory", None))]
    root = Path(checkout).resolve()
    for candidate in candidates:
        try:
            obj = inspect.unwrap(candidate)  # a factory as the repository wrote it (targets.py wraps it)
            source, line = inspect.getsourcefile(obj), inspect.getsourcelines(obj)[1]
        except (TypeError, OSError, ValueError):  # ValueError: a cycle of __wrapped__
            continue
        if source and Path(source).resolve().is_relative_to(root):
            return f"{Path(source).resolve().relative_to(root)}:{line}"
    return None


def _outcome(report: pytest.TestReport) -> str:
    """pytest's words: an expected failure is `xfailed`, an unexpected pass `xpassed` (JUnit cannot say the last)."""
    if hasattr(report, "wasxfail"):
        return "xpassed" if report.passed else "xfailed" if report.skipped else report.outcome
    return report.outcome


class ArtifactWriter:
    def __init__(self, output_dir: Path, files: BackgroundFiles) -> None:
        self.output_dir = output_dir
        self.files = files
        self.root = str(Path(os.environ.get("COMPILE_CI_CHECKOUT") or ".").resolve())
        self.captures: dict[str, Any] = {}
        self.written: set[str] = set()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, Any, None]:
        # The modules the capture hooks (dynamo's and inductor's: 2.3 s on the 2-core host quiet, up to 16 s under
        # load) imported at the end of the first test's setup, after its fixtures as before, not in its call: a
        # call's time is the test's own, and the bisection budgets by it (a failing first test whose call took
        # milliseconds was refused as "15.9 s each"). Not at the plugin's load: a job that runs no test never pays.
        outcome = yield
        if outcome.excinfo is None:
            from suites.capture import import_hooked

            import_hooked()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        from suites.capture import CompileCapture

        if _replaying():  # a bisection's run of the test (suites/bisect_session.py): not the test's artifacts
            yield
            return
        capture = CompileCapture(self.root)
        with capture.active(getattr(item, "instance", None)):
            yield
        self.captures[item.nodeid] = capture

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
        outcome = yield
        report: pytest.TestReport = outcome.get_result()
        if _replaying():
            return
        if report.failed:
            where = target_location(item)
            if where:  # a <property> in the JUnit XML: the service annotates the target's definition
                item.user_properties.append((TARGET_PROPERTY, where))
        if report.when == "call" or (report.when == "setup" and not report.passed):
            self._write(item, report)

    def _write(self, item: pytest.Item, report: pytest.TestReport) -> None:
        directory = test_dir(self.output_dir, item.nodeid)
        if item.nodeid in self.written:  # a rerun: what an earlier attempt left must not pass for the last one's
            self.files.submit(lambda: [p.unlink() for p in [*directory.glob("output_code_*.py"),
                                                            *directory.glob("repro.py")]])
        self.written.add(item.nodeid)
        self.files.submit(lambda: directory.mkdir(parents=True, exist_ok=True))
        capture = self.captures.pop(item.nodeid, None)
        codes = capture.codes if capture is not None else []
        for index, code in enumerate(codes):
            self.files.write(directory / f"output_code_{index}.py", code)
        metrics = {
            "nodeid": item.nodeid,
            "outcome": _outcome(report),
            "duration_s": round(report.duration, 4),
            "output_code_files": len(codes),
            # What the test recorded with record_property (a declared pass's call and match counters, say).
            **{str(key): value for key, value in item.user_properties if isinstance(value, int | float | str)},
            **(capture.metrics if capture is not None else {}),
            "code_bytes": capture.code_bytes if capture is not None else 0,
            "graph_break_reasons": capture.graph_break_reasons if capture is not None else [],
            "recompile_reasons": capture.recompile_reasons if capture is not None else [],
            "reruns": earlier_attempts(item),
            # The groups it belongs to (its declared targets' specs, or the built-in corpus): the service counts a
            # later job's shards from the tests its change can reach (service/jobs/shard_plan.py).
            "targets": sorted(sharding.target_specs(item) or ()),
        }
        self.files.write(directory / "metrics.json", json.dumps(metrics, indent=2))
        if report.failed:
            self.files.write(directory / "repro.py", _repro(item))


def _replaying() -> bool:
    module = sys.modules.get("suites.bisect_probe")
    return module is not None and module.replaying()


def record_environment(output_dir: Path) -> None:
    """Which torch and device really ran the job (the check run's summary), for the repository's own tests too."""
    import platform

    import torch

    cuda = torch.cuda.is_available()
    info = {
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "device": os.environ.get("COMPILE_CI_DEVICE", "").strip().lower() or "cpu",
        "device_name": torch.cuda.get_device_name(0) if cuda else platform.processor() or platform.machine(),
        "cuda_version": torch.version.cuda,
        # Which physical GPU: a host with several runs one cuda worker per GPU (COMPILE_CI_GPUS).
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "device_uuid": str(torch.cuda.get_device_properties(0).uuid) if cuda else None,
    }
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "environment.json").write_text(json.dumps(info, indent=2))


def pytest_configure(config: pytest.Config) -> None:
    reruns.register(config)
    output = os.environ.get(OUTPUT_ENV)
    if output and not config.pluginmanager.has_plugin("compile-ci-artifacts"):
        record_environment(Path(output))
        files = BackgroundFiles()
        config.pluginmanager.register(ArtifactWriter(Path(output), files), "compile-ci-artifacts")
        config.pluginmanager.register(ProgressWriter(Path(output), files), "compile-ci-progress")
        config.pluginmanager.register(LogSections(config), "compile-ci-log-sections")
        sharding.register(config, Path(output))  # a shard's share, or tests left to their base results
        device_context.register(config)  # a lost CUDA context: the tests after it run in a fresh process
        if os.environ.get("COMPILE_CI_BISECT_SECONDS"):  # the job's failures bisected after its tests ran
            from suites import bisect_session

            bisect_session.register(config, Path(output))


def pytest_sessionfinish(session: pytest.Session) -> None:
    output = os.environ.get(OUTPUT_ENV)
    if output and compiler_surface.installed():
        try:
            compiler_surface.write_record(os.path.join(output, SURFACE_FILE))
        except Exception as exc:  # noqa: BLE001 - a record missing is reported, the session's results are kept
            print(f"compile-ci: the compiler surface's record could not be written ({exc!r})", flush=True)
