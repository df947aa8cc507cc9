"""A real CUDA device-side assert in a job's test (issue 39): the tests after it judged in a fresh process. GPU host:
`python bench/cuda_trap_check.py` from the repository root (prints each test's outcome and process)."""
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.getcwd())
from tests.suites.repo_run import run_repo_tests  # noqa: E402

root = Path(tempfile.mkdtemp())
(root / "repo" / "tests").mkdir(parents=True)
(root / "repo" / "tests" / "test_gpu.py").write_text('''
import os
from pathlib import Path
import torch

def _pid(name):
    Path(os.environ["COMPILE_CI_OUTPUT_DIR"], "pid-" + name).write_text(str(os.getpid()))

def test_before():
    _pid("test_before"); assert torch.ones(4, device="cuda").sum().item() == 4

def test_traps():
    _pid("test_traps")
    x = torch.zeros(3, device="cuda")
    y = x[torch.tensor([5], device="cuda")]  # ATen's index kernel asserts on the device; reported later

def test_after():
    _pid("test_after"); assert torch.arange(5, device="cuda").sum().item() == 10

def test_compiled_after():
    _pid("test_compiled_after")
    f = torch.compile(lambda t: (t * 2).sin())
    t = torch.randn(64, device="cuda"); torch.testing.assert_close(f(t), (t * 2).sin())
''')
run = run_repo_tests(root / "repo", root / "work", extra_env={"COMPILE_CI_DEVICE": "cuda"}, timeout=280)
print("exit", run.returncode)
for name in run.cases:
    case = run.cases[name]
    bad = [c for c in case if c.tag in ("failure", "error")]
    print(name, run.outcome(name), (bad[0].get("message", "")[:160] if bad else ""))
for p in sorted((run.out).glob("pid-*")):
    print(p.name, p.read_text())
print("--- output tail")
print(run.output[-2500:])
