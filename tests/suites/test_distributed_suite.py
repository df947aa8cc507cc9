"""The distributed suite on two gloo ranks (CPU): the built-in corpus passes with both ranks agreeing, and a
repository's rank-dependent bugs fail with both ranks' side of the story."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from runners.gpus import GPU_JOB_ENV
from suites.distributed import launch
from suites.distributed.verdicts import COUNTERS
from suites.naming import sanitise_nodeid

from .suite_run import run_suite

RANKED_REPO = Path(__file__).resolve().parent / "distributed_repo"
WRAPPERS = ("ddp", "ddp_optimizer", "fsdp2")
# The default run takes the corpus's bucketed MLP through FSDP2 and DDPOptimizer's bucket split, which only it
# exercises (plain DDP on two ranks: test_rank_dependent_bugs_fail_with_both_ranks_reasons); -m heavy adds its DDP and
# DDPOptimizer training steps and the tiny transformer through all three (tests/conftest.py HEAVY): the same
# assertions.
CORPUS = {"bucketed_mlp": {"test_ddp_optimizer_splits_at_bucket_boundaries[bucketed_mlp]"}, "tiny_transformer": set()}
CI_WRAPPERS = {"bucketed_mlp": ("fsdp2",)}  # the default run's; every other case is heavy


def _ranked_env(**extra: str) -> dict[str, str]:
    return {"COMPILE_CI_TARGETS": json.dumps({"models": ["ranked.models:examples"]}),
            "COMPILE_CI_CHECKOUT": str(RANKED_REPO), **extra}


@pytest.mark.parametrize(("model", "wrappers"),
                         [pytest.param(model, CI_WRAPPERS[model], id=f"{model}-{'-'.join(CI_WRAPPERS[model])}")
                          for model in CI_WRAPPERS] +
                         [pytest.param(model, WRAPPERS, id=f"{model}-all") for model in CORPUS])
def test_the_corpus_passes_on_two_gloo_ranks_that_compiled_alike(tmp_path: Path, model: str,
                                                                 wrappers: tuple[str, ...]) -> None:
    out = tmp_path / "out"
    chosen = " or ".join(f"{model}-{wrapper}]" for wrapper in wrappers)
    selection = f"not test_declared_model and {model}" + ("" if wrappers == WRAPPERS else f" and ({chosen} or splits)")
    run = run_suite("distributed", selection, tmp_path, plugin="suites.plugin",
                    timeout=900, extra_env={"COMPILE_CI_OUTPUT_DIR": str(out)})
    assert run.returncode == 0, run.describe()
    tests = {f"test_training_step_matches_across_ranks[{model}-{wrapper}]" for wrapper in wrappers}
    assert run.named("passed") == tests | CORPUS[model], run.describe()
    for name in tests:
        recorded = run.properties[name]
        assert recorded["backend"] == "gloo", recorded
        assert all(recorded[f"rank0_{key}"] == recorded[f"rank1_{key}"] for key in COUNTERS), recorded
        assert int(recorded["rank0_backend_graphs"]) >= 1, recorded  # compiled, not eager under another name
    # Rank 0's generated code is the test's own on the job page.
    node = f"distributed/test_distributed.py::test_training_step_matches_across_ranks[{model}-fsdp2]"
    metrics = json.loads((out / "tests" / sanitise_nodeid(node) / "metrics.json").read_text())
    assert metrics["output_code_files"] >= 1 and metrics["rank0_graphs"] == metrics["rank1_graphs"], metrics


def test_rank_dependent_bugs_fail_with_both_ranks_reasons(tmp_path: Path) -> None:
    # The clean declared model is left to the corpus test's rule (it passes like them): one model fewer to compile.
    selection = "test_declared_model and ddp and not optimizer and (breaks or scaled or raises)"
    run = run_suite("distributed", selection, tmp_path, timeout=900, extra_env=_ranked_env())
    assert run.returncode == 1, run.describe()
    assert run.named("failed") == {f"test_declared_model[{name}-ddp]" for name in
                                   ("rank_one_breaks", "rank_scaled", "raises_on_rank_one")}, run.describe()

    breaks = run.messages["test_declared_model[rank_one_breaks-ddp]"]
    counts = re.search(r"graph breaks: rank 0 (\d+), rank 1 (\d+)", breaks)
    assert counts and int(counts[2]) == int(counts[1]) + 1, breaks
    assert re.search(r"graph breaks only on rank 1: Call to `torch._dynamo.graph_break\(\)`.*\(ranked/models.py:\d+\)",
                     breaks), breaks
    assert "rank 0 graph breaks (" in breaks and "rank 1 graph breaks (" in breaks, breaks

    # Rank 1's gradient is doubled: the eager DDP step is not the single-process step; compiled still equals eager.
    scaled = run.messages["test_declared_model[rank_scaled-ddp]"]
    assert "rank 0 eager ddp['grads'][0]['a.weight']: RMSE" in scaled, scaled
    assert "from the fp64 single-process step > 2 x the fp32 single-process step's" in scaled, scaled
    assert "compiled RMSE" not in scaled and "compiled differently" not in scaled, scaled

    raised = run.messages["test_declared_model[raises_on_rank_one-ddp]"]
    assert "rank 1 error: RuntimeError: planted failure on rank 1" in raised, raised
    # gloo's words for a peer that exited: closed or reset, depending on where rank 0's read was.
    assert re.search(r"rank 0 error: .*Connection (closed|reset) by peer", raised), raised


def test_a_rank_that_hangs_is_killed_at_the_time_limit(tmp_path: Path) -> None:
    env = _ranked_env(**{launch.TIMEOUT_ENV: "10"})
    run = run_suite("distributed", "test_declared_model and hangs and ddp and not optimizer", tmp_path, extra_env=env)
    assert run.outcomes == {"test_declared_model[hangs_on_rank_one-ddp]": "failed"}, run.describe()
    message = run.messages["test_declared_model[hangs_on_rank_one-ddp]"]
    assert "rank 1 left no result for ddp: was killed at the run's 10 s limit" in message, message
    # Rank 0 waited in DDP's all-reduce: killed at the limit too, or told by gloo that its peer is gone.
    assert re.search(r"rank 0 (left no result for ddp: was killed at the run's 10 s limit|error: .*Connection)",
                     message), message


def test_gpu_jobs_keep_nvlink_multicast_off_in_every_rank() -> None:
    # suites/ never imports runners/: the suite's copy of the variables must stay the runners'.
    assert launch.GPU_JOB_ENV == GPU_JOB_ENV
    env = launch.rank_environment("cuda")
    assert {key: env[key] for key in GPU_JOB_ENV} == GPU_JOB_ENV


def test_an_in_job_rerun_starts_new_ranks_so_a_flaky_failure_shows_as_flaky(tmp_path: Path) -> None:
    env = _ranked_env(COMPILE_CI_RERUNS="1", RANKED_ONCE_MARKER=str(tmp_path / "failed-once"))
    run = run_suite("distributed", "test_declared_model and fails_once and ddp and not optimizer", tmp_path,
                    plugin="suites.plugin", extra_env=env)
    name = "test_declared_model[fails_once_on_rank_one-ddp]"
    assert run.returncode == 0 and run.outcomes == {name: "passed"}, run.describe()
    assert run.properties[name]["compile_ci_reruns"] == "failed", run.properties[name]
