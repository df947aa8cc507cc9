"""A repository's declared targets (models, graph passes, fused functions) run through the suites that use them."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from suites.naming import sanitise_nodeid

from .suite_run import run_suite

DECLARED_REPO = Path(__file__).resolve().parent / "declared_repo"


def _job_env() -> dict[str, str]:
    targets = tomllib.loads((DECLARED_REPO / "compile-ci.toml").read_text())["targets"]
    return {"COMPILE_CI_TARGETS": json.dumps(targets), "COMPILE_CI_CHECKOUT": str(DECLARED_REPO)}


def test_declared_passes_run_on_declared_models_with_their_counters(tmp_path: Path) -> None:
    env = {**_job_env(), "COMPILE_CI_OUTPUT_DIR": str(tmp_path / "out")}
    run = run_suite(
        "passes", "test_declared_pass and doubled_residual", tmp_path, plugin="suites.plugin", extra_env=env
    )
    assert run.returncode == 0, run.describe()
    post = "test_declared_pass[post_grad_passes:zoo.passes:double_add_to_mul-doubled_residual]"
    pre = "test_declared_pass[pre_grad_passes:zoo.passes:count_linear_layers-doubled_residual]"
    assert run.named("passed") == {pre, post}, run.describe()
    # The rewrite really happened (forward and backward graphs), and the counters reached the JUnit XML.
    assert int(run.properties[post]["pattern_matcher_count"]) >= 1, run.properties[post]
    assert int(run.properties[post]["pass_calls"]) >= 2, run.properties[post]
    assert run.properties[pre]["pattern_matcher_count"] == "0", run.properties[pre]
    # ... and the test's metrics.json, which the job and test pages show.
    metrics = json.loads(
        (tmp_path / "out" / "tests" / sanitise_nodeid(f"passes/test_passes.py::{post}") / "metrics.json").read_text()
    )
    assert metrics["pattern_matcher_count"] >= 1 and metrics["declared_pass"] == "zoo.passes:double_add_to_mul", metrics


def test_declared_fused_functions_and_models_are_checked(tmp_path: Path) -> None:
    run = run_suite("fusion", "test_declared_fusion", tmp_path, extra_env=_job_env())
    assert run.returncode == 0, run.describe()
    assert run.named("passed") == {"test_declared_fusion[bias_gelu]", "test_declared_fusion[scaled_swish]"}


def test_a_declared_pass_that_changes_numerics_fails(tmp_path: Path) -> None:
    env = _job_env()
    env["COMPILE_CI_TARGETS"] = json.dumps({"models": ["zoo.models:examples"], "post_grad_passes": ["zoo.bad:drop"]})
    (tmp_path / "repo" / "zoo").mkdir(parents=True)
    for name in ("__init__.py", "models.py"):
        (tmp_path / "repo" / "zoo" / name).write_text((DECLARED_REPO / "zoo" / name).read_text())
    (tmp_path / "repo" / "zoo" / "bad.py").write_text(
        "import torch\n\n\n"
        "def drop(graph):\n"
        "    # replaces every tanh by its input: a bug the suite must report against eager\n"
        "    for node in list(graph.nodes):\n"
        "        if node.target is torch.ops.aten.tanh.default:\n"
        "            node.replace_all_uses_with(node.args[0])\n"
        "            graph.erase_node(node)\n"
    )
    env["COMPILE_CI_CHECKOUT"] = str(tmp_path / "repo")
    (tmp_path / "work").mkdir()
    run = run_suite("passes", "test_declared_pass and doubled_residual", tmp_path / "work", extra_env=env)
    assert run.returncode == 1, run.describe()
    name = "test_declared_pass[post_grad_passes:zoo.bad:drop-doubled_residual]"
    assert run.named("failed") == {name}, run.describe()
    # Explained: the tensor and the rule, and why torch's minifier (which drops custom passes) is not offered.
    message = run.messages[name]
    assert "ULPs from float64" in message and "RMSE vs float64" in message, message
    assert "tolerance: the suites' rule" in message, message
    assert "no minify.py: torch's minifier cannot reproduce a step under a custom pass" in message, message
    assert "post_grad_custom_post_pass" in message and "zoo.bad:drop" in message, message
