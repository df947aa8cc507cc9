"""The ops sweep runs every sample on its own copies and judges what an op writes into its arguments.

Found by the fifteenth sixteenth of the CPU sweep: OpInfo's samples 7 to 10 of ``nn.functional.batch_norm`` share
their running statistics and sample 8 trains (updating them in place), so eager, inductor and float64 each met other
running statistics at sample 7 (eager 33.64, compiled 26.76, float64 22.26) and stock torch was reported as an
upstream difference. And a compiler that updated the running statistics wrongly passed: nothing compared them.
Run in one fresh interpreter per test: the planted case replaces an entry of inductor's decomposition table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys
import torch
from suites.ops import catalog, sweep, tolerances

if sys.argv[1] == "planted":  # running_var written twice as large in training; what the op returns is untouched
    from torch._inductor import decomposition
    aten = torch.ops.aten
    key = aten._native_batch_norm_legit_functional.default
    stock = decomposition.decompositions[key]
    def doubled_running_var(*args, **kwargs):
        out, mean, rstd, running_mean, running_var = stock(*args, **kwargs)
        return out, mean, rstd, running_mean, running_var * 2
    decomposition.decompositions[key] = doubled_running_var
case = next(c for c in catalog.cases("cpu") if c.name == "nn.functional.batch_norm" and c.dtype == torch.float32)
run = sweep.run_case(case, "cpu", tolerances.for_case(case, "cpu"))
print(json.dumps({"judged": run.judged, "failures": {f.index: f.problem for f in run.failures}}))
"""


def _sweep_batch_norm(mode: str, tmp_path: Path) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"}
    result = subprocess.run([sys.executable, "-c", PROBE, mode], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=900, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_samples_that_share_running_statistics_are_judged_on_the_same_values(tmp_path: Path) -> None:
    seen = _sweep_batch_norm("stock", tmp_path)
    assert seen["judged"] == 12
    assert seen["failures"] == {}, "stock torch's batch_norm reported as different from itself"


def test_a_wrong_running_statistics_update_fails_naming_the_argument(tmp_path: Path) -> None:
    seen = _sweep_batch_norm("planted", tmp_path)
    failures = seen["failures"]
    assert isinstance(failures, dict) and failures, "a doubled running_var passed the sweep"
    assert all("arg 1 after the call" in problem for problem in failures.values()), failures
    # samples that do not train leave the running statistics alone and pass
    for evaluating in ("1", "6", "7", "9", "10"):
        assert evaluating not in failures
