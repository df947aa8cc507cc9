"""Every suite judges CUDA kernels in plain float32 (TF32 off for cuDNN and matmuls), and that must still work once
the ops suite has imported torch's OpInfos, which freeze cuDNN's flags against direct assignment. Found on an H100:
the fixture that assigned them failed every test of the ops suite at setup. Replayed here in a fresh interpreter
(the freeze is process-wide); the flags are plain process state, so no GPU is needed to see them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, torch
from suites import judging
from suites.ops import internals

internals.opinfo_database()  # as the ops suite loads it: torch's test utilities call disable_global_flags()

cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
try:
    cudnn.allow_tf32 = True
    frozen = False
except RuntimeError:
    frozen = True
matmul.allow_tf32 = True
before = [cudnn.enabled, cudnn.allow_tf32, matmul.allow_tf32, cudnn.deterministic]
with judging.full_precision_on_cuda("cuda"):
    inside = [cudnn.enabled, cudnn.allow_tf32, matmul.allow_tf32, cudnn.deterministic]
after = [cudnn.enabled, cudnn.allow_tf32, matmul.allow_tf32, cudnn.deterministic]
with judging.full_precision_on_cuda("cpu"):
    on_cpu = [cudnn.allow_tf32, matmul.allow_tf32]
print(json.dumps({"frozen": frozen, "before": before, "inside": inside, "after": after, "on_cpu": on_cpu}))
"""


def test_tf32_is_off_inside_and_restored_after_even_with_frozen_cudnn_flags() -> None:
    result = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300,
                            check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["frozen"], "torch no longer freezes cuDNN's flags: this replay no longer replays anything"
    assert seen["before"] == [True, True, True, False]
    # TF32 off; cuDNN itself stays on and nothing else changes (torch's flags() would turn cuDNN off by default)
    assert seen["inside"] == [True, False, False, False]
    assert seen["after"] == seen["before"]
    assert seen["on_cpu"] == [True, True], "a cpu job's flags are left alone"


FACTORY_PROBE = """
import json, torch
from suites import targets

def factory_opting_into_tf32():
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.set_float32_matmul_precision("high")  # the newer API as well
    return torch.nn.Linear(2, 2)

cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
cudnn.allow_tf32 = matmul.allow_tf32 = False  # as the suites' fixture leaves them on cuda
model = targets.keeping_float32_precision(factory_opting_into_tf32)()
print(json.dumps({"model": type(model).__name__, "cudnn": cudnn.allow_tf32, "matmul": matmul.allow_tf32,
                  "matmul_precision": getattr(matmul, "fp32_precision", "ieee")}))
"""


def test_a_declared_factory_cannot_turn_tf32_back_on_for_the_judgement() -> None:
    # In its own interpreter: torch refuses to report a precision set through both of its APIs afterwards.
    result = subprocess.run([sys.executable, "-c", FACTORY_PROBE], cwd=ROOT, capture_output=True, text=True,
                            timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen == {"model": "Linear", "cudnn": False, "matmul": False, "matmul_precision": "ieee"}
