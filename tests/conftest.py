"""Shared fixtures: a real Redis, the strict GitHub emulator, settings, signed webhook deliveries."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runners.toolchain import HOST_CHECKS_ENV, host_env, vec_isa_env
from service.config import Settings
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.sandbox.stack import APP_ID, app_keypair, free_port, wait_for_port
from tests.schedule import longest_first

# Sample repositories the suites test are data, not our tests: their tests are meant to fail and their conftest
# installs a compiler change into the process that imports it.
collect_ignore_glob = ["suites/*_repo"]


def pytest_configure(config: pytest.Config) -> None:
    """One host, one header seed (runners/header_seed.py): every test's worker takes inductor's precompiled header
    from one directory of this run, as every data directory of one worker host would, instead of each test's stack
    building it again. Set before xdist starts its workers, which inherit it; a test about the seed sets its own."""
    if not hasattr(config, "workerinput") and not os.environ.get("COMPILE_CI_HEADER_SEED_DIR"):
        seeds = tempfile.mkdtemp(prefix="compile-ci-test-seeds-")
        os.environ["COMPILE_CI_HEADER_SEED_DIR"] = seeds
        config.add_cleanup(lambda: shutil.rmtree(seeds, ignore_errors=True))
    if not hasattr(config, "workerinput") and not os.environ.get(HOST_CHECKS_ENV):
        _check_the_host_once(config)


def _check_the_host_once(config: pytest.Config) -> None:
    """One host, one set of toolchain checks: the run's interpreters (this one and the checkout wrapper every
    pipeline test's worker uses) are checked once, as `python -m runners.toolchain` does for a host's worker
    processes, and every worker the tests start takes the verdicts from COMPILE_CI_HOST_CHECKS instead of checking
    again (about 11 s of CPU each: 12 checks in a run before). Tests about the checks name interpreters or
    toolchains not checked here, or clear the variable."""
    shared = Path(tempfile.mkdtemp(prefix="compile-ci-test-python-"))
    config.add_cleanup(lambda: shutil.rmtree(shared, ignore_errors=True))
    os.environ[_SHARED_PYTHON] = str(wrapper_python(shared / "checkout-python"))
    done = subprocess.run([sys.executable, "-m", "runners.toolchain", sys.executable, os.environ[_SHARED_PYTHON]],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise pytest.UsageError(f"python -m runners.toolchain failed (exit {done.returncode}): {done.stderr[-2000:]}")
    os.environ[HOST_CHECKS_ENV] = done.stdout.strip()
    # The tests' own inductor processes (the suites run directly, probes) get the toolchain a LocalRunner's job gets
    # and, when it passed the check, skip the vector-ISA probe as that job does (0.9 s of CPU each on this host).
    tool = host_env()
    if "COMPILER_PATH" in tool:
        os.environ.setdefault("COMPILER_PATH", tool["COMPILER_PATH"])
    os.environ.update(vec_isa_env(sys.executable, {**tool, "COMPILER_PATH": os.environ.get("COMPILER_PATH", "")}))


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Redis on loopback: COMPILE_CI_TEST_REDIS_URL (CI starts one), else a private redis-server."""
    if os.environ.get("COMPILE_CI_TEST_REDIS_URL"):
        yield os.environ["COMPILE_CI_TEST_REDIS_URL"].rstrip("/")
        return
    server = shutil.which("redis-server")
    if server is None:
        pytest.fail("redis-server is required (apt-get install redis-server)")
    port = free_port()
    proc = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(tmp_path_factory.mktemp("redis"))],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    wait_for_port(port, proc, "redis-server")
    yield f"redis://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=10)


def _worker_index() -> int:
    """Which pytest-xdist worker this process is (0 without xdist): scripts/test.sh runs three."""
    return int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)


# Redis has 16 databases: each xdist worker takes its own share of 1-15 (two workers: 1-7 and 8-14; three: 1-5,
# 6-10 and 11-15), so workers sharing CI's Redis never flush each other's; a worker past its share keeps its last.
_WORKERS = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1))
_SHARE = max(1, 15 // _WORKERS)
_FIRST_DB = 1 + _SHARE * min(_worker_index(), 15 // _SHARE - 1)
_LAST_DB = min(_FIRST_DB + _SHARE - 1, 15)
_db_counter = iter(range(_FIRST_DB, _LAST_DB + 1))


@pytest.fixture
def redis_url(redis_server: str) -> Iterator[str]:
    """A clean Redis database for one test."""
    import redis

    url = f"{redis_server}/{next(_db_counter, _LAST_DB)}"
    client = redis.Redis.from_url(url)
    client.flushdb()
    yield url
    client.flushdb()
    client.close()


@pytest.fixture(scope="session")
def app_keys() -> tuple[str, str]:
    return app_keypair()


@pytest.fixture
def emulator(app_keys: tuple[str, str]) -> Iterator[GitHubEmulator]:
    """The strict fake GitHub; any unknown route or invalid body fails the test."""
    with GitHubEmulator(app_id=APP_ID, public_key_pem=app_keys[1]) as fake:
        yield fake
        assert fake.errors == [], f"requests GitHub would not accept: {fake.errors}"


def make_settings(tmp_path: Path, redis_url: str, github_url: str, private_key: str, **extra: str) -> Settings:
    return Settings.from_env(settings_env(tmp_path, redis_url, github_url, private_key, **extra))


def settings_env(tmp_path: Path, redis_url: str, github_url: str, private_key: str, **extra: str) -> dict[str, str]:
    """The COMPILE_CI_* environment of a test's deployment (also for worker processes the test starts)."""
    return {
        "COMPILE_CI_WEBHOOK_SECRET": "test-webhook-secret",
        "COMPILE_CI_GITHUB_APP_ID": str(APP_ID),
        "COMPILE_CI_GITHUB_PRIVATE_KEY": private_key,
        "COMPILE_CI_GITHUB_API_URL": github_url,
        "COMPILE_CI_GITHUB_THROTTLE": "false",
        "COMPILE_CI_REDIS_URL": redis_url,
        "COMPILE_CI_DATA_DIR": str(tmp_path / "data"),
        "COMPILE_CI_PUBLIC_URL": "http://ci.example.test",
        "COMPILE_CI_CLONE_URL_TEMPLATE": (tmp_path / "repos").as_uri() + "/{full_name}",
        "COMPILE_CI_DEVICES": "cpu",
        # The pipeline tests run their own small suites from the host; the Docker runner has its own tests.
        "COMPILE_CI_RUNNER": "local",
        # One shard per job, as a deployment with one worker slot runs: sharding has its own tests (test_shards.py).
        "COMPILE_CI_MAX_SHARDS": "1",
        **extra,
    }



ROOT = Path(__file__).resolve().parents[1]
_SHARED_PYTHON = "COMPILE_CI_TEST_CHECKOUT_PYTHON"


def wrapper_python(path: Path, **variables: str) -> Path:
    """An interpreter for a LocalRunner's jobs that imports `suites` (the plugin, the job's entry) from this checkout,
    not from wherever the virtual environment's editable install points, with `variables` set."""
    assignments = "".join(f"{name}={value} " for name, value in variables.items())
    path.write_text(f'#!/bin/sh\nPYTHONPATH={ROOT} {assignments}exec {sys.executable} "$@"\n')
    path.chmod(0o755)
    return path


@pytest.fixture(scope="session")
def checkout_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One such interpreter for the run (COMPILE_CI_RUNNER_PYTHON of the pipeline tests). A LocalRunner checks an
    interpreter's vector ISA and computes its source keys once per worker process and interpreter path
    (runners/toolchain.py: about 10 s of CPU on this host) unless COMPILE_CI_HOST_CHECKS has them: this one's are
    checked once for the run (pytest_configure); a wrapper of its own in every test paid them every test."""
    shared = os.environ.get(_SHARED_PYTHON)  # the run's, checked once (pytest_configure)
    return Path(shared) if shared else wrapper_python(tmp_path_factory.getbasetemp() / "checkout-python")


@pytest.fixture
def settings(tmp_path: Path, redis_url: str, emulator: GitHubEmulator, app_keys: tuple[str, str]) -> Settings:
    return make_settings(tmp_path, redis_url, emulator.url, app_keys[0])


# Tests CI leaves out to stay within its time (pyproject's addopts: -m "not heavy"); each repeats, on another runner
# or with another plant, a property a test that CI runs proves. `bash scripts/test.sh -m heavy` runs them, and the
# run's summary says how many were left out.
HEAVY = (
    "tests/runners/test_compile_cache_attack.py::test_an_untrusted_pull_request_cannot_poison_or_read_across[local]",
    "tests/runners/test_toolchain.py::test_the_system_linker_when_asked[local]",
    "tests/runners/test_toolchain.py::test_a_job_links_with_lld_and_skips_the_vector_isa_probe_picking_what_it_picks[local]",
    "tests/integration/test_shards.py::test_a_sharded_job_shows_its_shards_progress_together_and_stops_them_all",
    "tests/suites/test_distributed_suite.py::test_a_rank_that_hangs_is_killed_at_the_time_limit",
    "tests/suites/test_distributed_suite.py::test_an_in_job_rerun_starts_new_ranks_so_a_flaky_failure_shows_as_flaky",
    "tests/suites/test_distributed_suite.py::test_the_corpus_passes_on_two_gloo_ranks_that_compiled_alike[tiny_",
    # 2026-11-30, twentieth session (CI time): the bucketed MLP's DDP and DDPOptimizer training steps (about 45 s of
    # CPU); CI keeps its FSDP2 step and DDPOptimizer's bucket split (the [bucketed_mlp-fsdp2] case) and plain DDP on
    # two ranks with the declared models (test_rank_dependent_bugs_fail_with_both_ranks_reasons)
    "tests/suites/test_distributed_suite.py::test_the_corpus_passes_on_two_gloo_ranks_that_compiled_alike"
    "[bucketed_mlp-all]",
    "tests/suites/test_planted_numerics.py::test_softmax_without_max_shift_is_caught",
    "tests/suites/test_planted_numerics.py::test_variance_by_cancellation_is_caught",
    "tests/suites/test_planted_breadth.py::test_planted_bug_is_caught[xor_as_or]",
    "tests/suites/test_planted_breadth.py::test_planted_bug_is_caught[random_ops_share_seed]",
    "tests/runners/test_compile_cache.py::test_a_trusted_job_killed_mid_write_leaves_nothing_half_written[local]",
    "tests/runners/test_job_startup.py::test_local_jobs_keep_inductors_precompiled_header_in_their_cache",
    # issue 39: the fused chains catch tanh's plant and pass the faithful rewrite in CI; these add the other plants
    # there, the sweep and the fragile layers
    "tests/suites/test_planted_small_values.py::test_the_fused_chains_catch_the_plants_on_their_ops_and_pass_the_faithful_rewrite[log1p_by_log]",
    "tests/suites/test_planted_small_values.py::test_the_fused_chains_catch_the_plants_on_their_ops_and_pass_the_faithful_rewrite[silu_flush]",
    "tests/suites/test_planted_small_values.py::test_the_sweep_catches_each_plant_at_its_op_and_names_the_small_input",
    "tests/suites/test_planted_small_values.py::test_the_fragile_layers_catch_the_plants_only_where_values_are_small",
    # issue 40 (CI time): the real models' four slowest suites (285 s of 308); CI keeps fusion on the
    # same three models through the same install phase (the passes suite runs on the declared zoo in CI:
    # tests/suites/test_declared_targets.py)
    "tests/suites/test_real_models.py::test_real_models_pass_each_suite[passes]",
    "tests/suites/test_real_models.py::test_real_models_pass_each_suite[correctness]",
    "tests/suites/test_real_models.py::test_real_models_pass_each_suite[autograd]",
    "tests/suites/test_real_models.py::test_real_models_pass_each_suite[layout]",
    # 2026-11-29: freezing too; CI keeps fusion on the three real models through the install phase, and the freezing
    # suite clean and planted on its own corpus (tests/suites/test_planted_freezing.py)
    "tests/suites/test_real_models.py::test_real_models_pass_each_suite[freezing]",
    # issue 40 (CI time): the install-step fork through the interpreter itself and through a wrapper that replaces
    # PYTHONPATH (about 25 s each); CI keeps the wrapper that adds to it (its variables, its path and the step's boot
    # directory reach the forked job) and the plain fork without a step (tests/runners/test_warm_start.py)
    "tests/runners/test_warm_install.py::test_a_job_with_an_install_step_forks_and_is_the_fresh_job[the interpreter]",
    "tests/runners/test_warm_install.py::test_a_job_with_an_install_step_forks_and_is_the_fresh_job"
    "[a wrapper that sets its path]",
    # 2026-11-29 (CI time: CI's whole run took 1,233 s; the host is CPU-bound, 96 % busy through the run, so these
    # are left out by their CPU). The warm interpreter's proofs stay: it is the LocalRunner's default.
    # 37 s of CPU: its two halves are proven in CI by tests/compare/test_code_noise_torch.py (the same code, cold and
    # then warm in another order, is unchanged) and, through the pipeline against a base run,
    # tests/integration/test_base_compare_torch.py (a pass that changes the generated code is counted as changed).
    "tests/integration/test_code_signal_torch.py::test_a_readme_only_pull_request_changes_nothing_and_a_code_change"
    "_still_does",
    # 24 s of CPU (a real prefork worker and its pool): what it proves saves time, never changes an outcome; CI keeps
    # a worker that prepares as it starts (the file's other test) and the preparation's locks across a fork
    # (tests/runners/test_header_seed.py).
    "tests/integration/test_host_preparation.py::test_a_prefork_worker_prepares_as_it_starts_and_each_pool_process"
    "_as_it_is_forked",
    # 2026-11-29, sixteenth session (CI time: CI's whole run took 1,243 s; these by their CPU, measured per test):
    # 33 s of CPU, a real worker process SIGKILLed under two torch shards; CI keeps the same recovery through a real
    # store and Redis lease of a worker that is gone (tests/integration/test_shard_reaper.py, a restarted worker runs
    # its killed predecessor's shard again alone), the retry rule (tests/unit/test_shard_lifecycle.py) and two shards
    # on two real worker threads (this file's other test).
    "tests/integration/test_shards.py::test_a_shard_whose_worker_is_killed_runs_again_alone",
    # 25 s of CPU, three jobs with an editable install; CI keeps what decides a fresh start (this file's
    # test_what_could_change_the_warm_imports_is_found: a .pth that runs code, a requirement named like a warm
    # module) and the forked install step that a job takes otherwise (the wrapper that adds to PYTHONPATH).
    "tests/runners/test_warm_install.py::test_a_requirement_whose_pth_runs_code_starts_afresh_after_the_step",
    # 2026-11-30, nineteenth session (CI time: CI's whole run took 1,528 s; by their CPU, measured per test with
    # their reaped children): 83 s of CPU, one suite through the service on two torch versions; CI keeps the routing's
    # parts on the real second torch (tests/unit/test_torch_matrix.py: one job per version planned, a worker of a
    # version consuming only its queues, a runner naming its torch and refusing a job of another, the canary's
    # comparison) and the daily canary through the service (this file's other test).
    "tests/integration/test_torch_matrix.py::test_one_suite_on_two_torch_versions_each_failure_on_its_own_check_run",
    # 31 s of CPU: a declared pass named on its hook by the bisector; CI keeps the same bisection through the service
    # (tests/integration/test_bisection_flow.py: a wrong declared pass bisected in its job and named on the check run)
    # and the hook-to-pass naming (test_bisection.py's test_a_custom_pass_hook_names_the_declared_pass_of_its_kind).
    "tests/suites/test_bisection.py::test_a_declared_pass_is_named_on_its_hook_with_its_line",
    # 29 s of CPU: the op sweep's trap; CI keeps a trap's verdict and the fresh process for every test after it, in
    # a plain job, a shard that takes its tests and any set of traps drawn at random (this file's other tests).
    "tests/suites/test_device_context.py::test_the_op_sweep_turns_a_trap_into_a_verdict_and_judges_the_cases_after_it",
)
_LEFT_OUT: list[str] = []


# With `-n 2 --dist loadfile` (scripts/test.sh) each file's tests stay on one worker (its module fixtures are set up
# once). A file with a test that uses the Docker engine, the shared runner image tag or its job containers (named
# from job ids that tests repeat) holds a lock shared by the workers while it runs (`_one_docker_file_at_a_time`), so
# no two such files run at once. (pytest-xdist's `loadgroup` would group them, but its marks do nothing on pytest 9.2:
# it renames `item._nodeid`, which pytest 9.2 no longer reads.)
DOCKER_FILES = ("tests/e2e/", "tests/integration/test_cache_verdicts.py", "tests/integration/test_install.py",
                "tests/integration/test_output_attacks.py", "tests/runners/test_docker_runner.py",
                "tests/runners/test_runner_image.py")


_DOCKER_MODULES: set[str] = set()


@pytest.fixture(scope="module", autouse=True)
def _one_docker_file_at_a_time(request: pytest.FixtureRequest,
                               tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Autouse and module-scoped, so it is set up before the module's own fixtures (the e2e stack) and held until
    they are torn down. Without xdist there is one process and the lock is always free."""
    if str(request.path) not in _DOCKER_MODULES:
        yield
        return
    import fcntl

    # Every xdist worker's base temp is <run's root>/popen-gwN: the lock lives in the run's root, shared by all.
    root = tmp_path_factory.getbasetemp()
    root = root.parent if root.name.startswith("popen-gw") else root
    with open(root / "docker-tests.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def uses_docker(item: Any) -> bool:
    names = set(getattr(item, "fixturenames", ()))
    params = getattr(getattr(item, "callspec", None), "params", {})
    return (item.nodeid.startswith(DOCKER_FILES) or bool(names & {"docker_client", "docker_runner"})
            or params.get("runner") == "docker")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[Any]) -> None:
    for item in items:
        if item.nodeid.startswith(HEAVY):
            item.add_marker(pytest.mark.heavy)
        if uses_docker(item):
            _DOCKER_MODULES.add(str(item.path))
    items[:] = longest_first(items, {str(item.path) for item in items if uses_docker(item)})


def pytest_deselected(items: list[Any]) -> None:
    _LEFT_OUT.extend(item.nodeid for item in items if item.get_closest_marker("heavy"))


def pytest_sessionfinish(session: pytest.Session) -> None:
    # An xdist worker collects and deselects; the controller prints the summary: hand it the list.
    if hasattr(session.config, "workeroutput"):
        session.config.workeroutput["heavy_left_out"] = json.dumps(sorted(set(_LEFT_OUT)))


def pytest_testnodedown(node: Any, error: Any) -> None:
    left_out = json.loads(getattr(node, "workeroutput", {}).get("heavy_left_out", "[]"))
    _LEFT_OUT.extend(nodeid for nodeid in left_out if nodeid not in _LEFT_OUT)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _LEFT_OUT:
        terminalreporter.write_line(f"{len(_LEFT_OUT)} heavy tests left out (-m 'not heavy'); run them with "
                                    f"`bash scripts/test.sh -m heavy` (tests/conftest.py HEAVY says which and why)")
