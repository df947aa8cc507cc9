"""A failing declared-model test's repro.py runs from a clone of the repository, in a fresh process, and fails the
same way; the failure names the model's definition in the repository (where the service annotates it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from werkzeug.serving import make_server

from service.config import Settings
from service.store import Store
from service.web.app import create_app
from suites.naming import sanitise_nodeid
from tests.browser.seed import SeededTest, seed_job, seed_run

from .suite_run import REPO, run_suite

MODELS = '''import torch
from torch import nn


class Drifts(nn.Module):
    """Doubles its input only when compiled: the correctness suite must catch it."""

    def forward(self, x):
        if torch.compiler.is_compiling():
            return x * 2
        return x


def examples():
    return [("drifts", Drifts, (torch.randn(4, 4),))]
'''
TEST = "test_declared_model[drifts]"


def test_repro_of_a_failing_declared_model_runs_from_a_clone_and_fails_the_same_way(tmp_path: Path,
                                                                                     settings: Settings) -> None:
    checkout = tmp_path / "job" / "checkout"
    (checkout / "zoo").mkdir(parents=True)
    (checkout / "zoo" / "__init__.py").write_text("")
    (checkout / "zoo" / "models.py").write_text(MODELS)
    out = tmp_path / "job" / "out"
    env = {"COMPILE_CI_TARGETS": json.dumps({"models": ["zoo.models:examples"]}),
           "COMPILE_CI_CHECKOUT": str(checkout), "COMPILE_CI_OUTPUT_DIR": str(out)}
    (tmp_path / "job" / "work").mkdir()
    run = run_suite("correctness", "test_declared_model", tmp_path / "job" / "work", plugin="suites.plugin",
                    extra_env=env)
    assert run.outcomes.get(TEST) == "failed", run.describe()
    # Where the service annotates it: the class named by the declared models, in the repository's file.
    assert run.properties[TEST]["compile_ci_target"] == "zoo/models.py:5", run.properties[TEST]
    repro = out / "tests" / sanitise_nodeid(f"correctness/test_correctness.py::{TEST}") / "repro.py"
    text = repro.read_text()
    assert str(tmp_path) not in text, "the repro names a path of the job's machine"

    # The service keeps the job's artifacts and serves its pages; a developer's clone is elsewhere, and the job's
    # directories are gone. `compile-ci repro <job page URL> drifts` fetches the repro and runs it there.
    store = Store(settings.database_url)
    job = seed_job(settings, store, seed_run(store), [SeededTest(f"correctness/test_correctness.py::{TEST}", "failed")])
    shutil.copy(repro, settings.artifacts_dir / job.run_id / job.id / "1" / repro.relative_to(out))
    clone = tmp_path / "laptop" / "widgets"
    shutil.copytree(checkout, clone)
    shutil.rmtree(tmp_path / "job")
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPILE_CI_")}
    env["PYTHONPATH"] = str(REPO)  # compile-ci's suites, as a developer would have them
    server = make_server("127.0.0.1", 0, create_app(settings), threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        proc = subprocess.run([sys.executable, "-m", "service.cli", "repro",
                               f"http://127.0.0.1:{server.server_port}/jobs/{job.id}", "drifts"],
                              cwd=clone, env=env, capture_output=True, text=True, timeout=300)
    finally:
        server.shutdown()
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output[-4000:]
    assert "FAILED " in output and TEST in output, output[-4000:]
    # The same failure: the job's first failure line (pytest's "Failed: " prefix aside) in the developer's output.
    first_line = run.messages[TEST].strip().splitlines()[0].removeprefix("Failed: ")
    assert "compiled result differs from eager" in first_line and first_line in output, (first_line, output[-4000:])
