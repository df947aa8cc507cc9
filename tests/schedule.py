"""The order the test files are handed to the xdist workers (`--dist loadfile --no-loadscope-reorder`,
scripts/test.sh): longest first, so the run does not end on one worker with a long file while the others idle, and
a Docker file only after as much other work as the last Docker file takes, since they take turns on one lock
(tests/conftest.py) and a worker that starts the next one early waits idle for it.

A file's weight is its time in the last measured full run (its JUnit times, this 2-core host quiet, 2026-11-30
17:08, a clean clone's `bash .ci/run`, its module fixtures included; files of 15 s and more); a file not listed
weighs nothing and keeps its collection order after the listed ones. Since: test_bisection.py 210 s (its
out-of-time test waits 12 s, not 60; the 2026-11-30 21:06 run), test_zygote.py 16 s (its timeout 10 s, not 30).
(Weights left stale put tests/unit/test_zygote.py, new and unlisted, last: its 30 s wait for a timeout was the run's
last 30 s, one worker busy and two done.)
The order changes only when the run takes; every test runs either way.
"""

from __future__ import annotations

from typing import Any

SECONDS = {
    "tests/suites/test_bisection.py": 210, "tests/runners/test_docker_prestart.py": 144,
    "tests/e2e/test_pull_request_e2e.py": 142, "tests/suites/test_distributed_suite.py": 132,
    "tests/suites/test_planted_ops.py": 107, "tests/runners/test_job_startup.py": 107,
    "tests/suites/test_device_context.py": 101, "tests/integration/test_cache_verdicts.py": 95,
    "tests/suites/test_red_explained.py": 78, "tests/integration/test_reuse.py": 78,
    "tests/unit/test_shard_selection.py": 77, "tests/runners/test_compile_cache_attack.py": 74,
    "tests/suites/test_planted_breadth.py": 72, "tests/runners/test_compile_cache_shared.py": 72,
    "tests/runners/test_warm_start.py": 66, "tests/runners/test_runner_contract.py": 56,
    "tests/suites/test_cpu_levels.py": 54, "tests/integration/test_output_attacks.py": 54,
    "tests/integration/test_commands_flow.py": 54, "tests/suites/test_repro.py": 49,
    "tests/integration/test_install.py": 45, "tests/browser/test_layout.py": 45,
    "tests/integration/test_metrics.py": 44, "tests/runners/test_warm_install.py": 44,
    "tests/runners/test_cpu_shares_jobs.py": 44, "tests/runners/test_toolchain.py": 44,
    "tests/runners/test_warm_compiler.py": 43, "tests/compare/test_code_noise_torch.py": 42,
    "tests/integration/test_base_compare_torch.py": 42, "tests/suites/test_surface_selection.py": 40,
    "tests/suites/test_planted_numerics.py": 39, "tests/suites/test_compiler_surface_hosts.py": 38,
    "tests/compare/test_codediff.py": 38, "tests/unit/test_zygote.py": 16, "tests/runners/test_header_seed.py": 36,
    "tests/suites/test_ops_judgement.py": 34, "tests/suites/test_ops_arguments.py": 34,
    "tests/suites/test_coverage_plugin.py": 32, "tests/runners/test_output_trust.py": 32,
    "tests/suites/test_declared_targets.py": 31, "tests/unit/test_shard_claims.py": 31,
    "tests/integration/test_base_judgement.py": 29, "tests/integration/test_pipeline.py": 29,
    "tests/suites/test_planted_passes.py": 29, "tests/suites/test_planted_freezing.py": 28,
    "tests/integration/test_bisection_flow.py": 28, "tests/suites/test_compiler_surface_job.py": 26,
    "tests/suites/test_compiler_surface_places.py": 25, "tests/integration/test_host_preparation.py": 25,
    "tests/integration/test_sandbox_signals.py": 24, "tests/suites/test_compiler_surface_patterns.py": 24,
    "tests/suites/test_planted_autograd.py": 23, "tests/suites/test_real_models.py": 22,
    "tests/suites/test_planted_layout.py": 21, "tests/suites/test_capture.py": 21,
    "tests/suites/test_compiler_surface_property.py": 20, "tests/integration/test_shards.py": 19,
    "tests/browser/test_log_viewer.py": 16, "tests/suites/test_reruns.py": 15,
    "tests/integration/test_webhook_slow_clients.py": 15, "tests/runners/test_runner_image.py": 15,
}


# Files handed out only once this many seconds of other files were: they wait for the second torch, which
# scripts/test.sh installs beside the tests (about 3 min on a fresh machine; tests/next_torch.py).
NOT_BEFORE = {"tests/integration/test_torch_matrix.py": 900, "tests/unit/test_torch_matrix.py": 900}


def longest_first(items: list[Any], docker_files: set[str]) -> list[Any]:
    """`items` grouped by file (in the order their files first appear), the files longest first, Docker files spaced
    by other work while there is some."""
    files: dict[str, list[Any]] = {}
    for item in items:
        files.setdefault(str(item.path), []).append(item)

    def weight(path: str) -> int:
        return next((seconds for name, seconds in SECONDS.items() if path.endswith(name)), 0)

    def bar(path: str) -> int:
        return next((seconds for name, seconds in NOT_BEFORE.items() if path.endswith(name)), 0)

    queue = sorted(files, key=lambda path: -weight(path))  # stable: unlisted files keep their order
    ordered: list[str] = []
    owed = 0  # seconds of other files still to hand out before the next Docker file: the last one's own time
    handed = 0  # seconds of files handed out so far
    while queue:
        ready = [i for i, path in enumerate(queue) if bar(path) <= handed] or [0]
        pick = ready[0]
        if queue[pick] in docker_files and owed > 0:
            pick = next((i for i in ready if queue[i] not in docker_files), pick)
        path = queue.pop(pick)
        owed = weight(path) if path in docker_files else max(owed - max(weight(path), 1), 0)
        handed += weight(path)
        ordered.append(path)
    return [item for path in ordered for item in files[path]]
