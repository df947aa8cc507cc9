"""The order the test files are handed to the two xdist workers (`--dist loadfile --no-loadscope-reorder`,
scripts/test.sh): longest first, so the run does not end on one worker with a long file while the other idles, and
a Docker file only after as much other work as the last Docker file takes, since they take turns on one lock
(tests/conftest.py) and a worker that starts the next one early waits idle for it.

A file's weight is its time in the last measured full run (`pytest --durations`, this 2-core host, 2026-11-28, its
module fixtures included); a file not listed weighs nothing and keeps its collection order after the listed ones.
The order changes only when the run takes; every test runs either way.
"""

from __future__ import annotations

from typing import Any

SECONDS = {
    "tests/e2e/test_pull_request_e2e.py": 250, "tests/integration/test_cache_verdicts.py": 190,
    "tests/integration/test_reuse.py": 150, "tests/suites/test_bisection.py": 140,
    "tests/suites/test_planted_ops.py": 110, "tests/integration/test_shards.py": 100,
    "tests/suites/test_red_explained.py": 90, "tests/suites/test_planted_breadth.py": 87,
    "tests/integration/test_commands_flow.py": 85, "tests/suites/test_distributed_suite.py": 82,
    "tests/suites/test_real_models.py": 75, "tests/integration/test_torch_matrix.py": 70,
    "tests/suites/test_cpu_levels.py": 65, "tests/runners/test_toolchain.py": 62,
    "tests/integration/test_base_compare_torch.py": 58, "tests/runners/test_compile_cache_attack.py": 55,
    "tests/runners/test_job_startup.py": 54, "tests/runners/test_compile_cache_shared.py": 54,
    "tests/integration/test_code_signal_torch.py": 53, "tests/integration/test_metrics.py": 50,
    "tests/integration/test_install.py": 75, "tests/runners/test_gpu_selection.py": 75,
    "tests/compare/test_code_noise_torch.py": 65, "tests/suites/test_planted_passes.py": 48,
    "tests/suites/test_planted_numerics.py": 46, "tests/integration/test_bisection_flow.py": 43,
    "tests/suites/test_planted_freezing.py": 43, "tests/integration/test_base_judgement.py": 42,
    "tests/runners/test_warm_start.py": 100, "tests/runners/test_warm_install.py": 150,
}


def longest_first(items: list[Any], docker_files: set[str]) -> list[Any]:
    """`items` grouped by file (in the order their files first appear), the files longest first, Docker files spaced
    by other work while there is some."""
    files: dict[str, list[Any]] = {}
    for item in items:
        files.setdefault(str(item.path), []).append(item)

    def weight(path: str) -> int:
        return next((seconds for name, seconds in SECONDS.items() if path.endswith(name)), 0)

    queue = sorted(files, key=lambda path: -weight(path))  # stable: unlisted files keep their order
    ordered: list[str] = []
    owed = 0  # seconds of other files still to hand out before the next Docker file: the last one's own time
    while queue:
        pick = 0
        if queue[0] in docker_files and owed > 0:
            pick = next((i for i, path in enumerate(queue) if path not in docker_files), 0)
        path = queue.pop(pick)
        owed = weight(path) if path in docker_files else max(owed - max(weight(path), 1), 0)
        ordered.append(path)
    return [item for path in ordered for item in files[path]]
