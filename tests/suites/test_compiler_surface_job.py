"""The compiler surface in a job's process: the control, native code, torch's files and the record for the service.

- The control: a repository with its own package and tests that compiles a function, a module with its backward and
  dynamic shapes, run the way a job runs pytest, changes nothing: no compile is tagged (every cache hit kept) and
  `surface.json` says so.
- Native code the repository loads (a shared object from outside the runner's directories, through ctypes as
  `torch.ops.load_library` does) cannot be described by any key: the job's compiles get a tag of their own, the job's
  log says so, and the record names it.
- A module of torch's loaded from a file outside torch is a torch whose files differ.
- `surface.json` is bounded: at most 200 changes (the rest counted), every string capped.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from service.jobs.pipeline import pytest_command

REPO = Path(__file__).resolve().parents[2]
CONTROL_PACKAGE = '''
import torch


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.nn.functional.silu(self.linear(x)).sum(-1)
'''
CONTROL_TESTS = '''
import torch

from stack.model import Block


def untagged():
    return torch.compiler.config.cache_key_tag == ""


def test_a_function():
    f = torch.compile(lambda x: torch.sin(x) + torch.sinh(x) * 2 + 1)
    torch.testing.assert_close(f(torch.linspace(-1, 1, 16)), torch.sin(torch.linspace(-1, 1, 16)) * 1 +
                               torch.sinh(torch.linspace(-1, 1, 16)) * 2 + 1)
    assert untagged()


def test_a_module_and_its_backward_with_dynamic_shapes():
    torch.manual_seed(0)
    block = Block()
    compiled = torch.compile(block, dynamic=True)
    for rows in (3, 5):
        x = torch.randn(rows, 8, requires_grad=True)
        compiled(x).sum().backward()
        torch.testing.assert_close(compiled(x), block(x))
    assert untagged()
'''
SCRIPT = '''
import ctypes, importlib.util, json, os, sys
from suites import compiler_surface as surface
surface.install()
import torch
from torch._inductor import lowering
seen = {"stock": surface.fingerprint()}
spec = importlib.util.spec_from_file_location("torch._inductor.planted", sys.argv[1])
planted = importlib.util.module_from_spec(spec)
sys.modules["torch._inductor.planted"] = planted
spec.loader.exec_module(planted)
seen["planted"] = [[c.place, c.kind, c.where] for c in surface.changes()]
del sys.modules["torch._inductor.planted"]
for index in range(250):  # 250 functions of the repository's added to a module of torch's
    setattr(lowering, "added_" + "x" * 400 + str(index), planted.helper)
surface.write_record(sys.argv[3] + "/many.json")
for index in range(250):
    delattr(lowering, "added_" + "x" * 400 + str(index))
seen["before native"] = surface.fingerprint()
ctypes.CDLL(sys.argv[2])
seen["native"] = surface.fingerprint()
seen["native changes"] = [[c.place, c.kind, c.where] for c in surface.changes()]
surface.refresh_tag()
seen["tag"] = torch.compiler.config.cache_key_tag
surface.write_record(sys.argv[3] + "/native.json")
print(json.dumps(seen))
'''


def test_the_control_changes_nothing_and_keeps_every_key(tmp_path: Path) -> None:
    checkout, out = tmp_path / "checkout", tmp_path / "out"
    (checkout / "stack").mkdir(parents=True)
    (checkout / "stack" / "__init__.py").write_text("")
    (checkout / "stack" / "model.py").write_text(CONTROL_PACKAGE)
    (checkout / "tests").mkdir()
    (checkout / "tests" / "test_control.py").write_text(CONTROL_TESTS)
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPILE_CI_", "PYTEST_"))}
    env.update(PYTHONPATH=os.pathsep.join([str(REPO), str(checkout)]), COMPILE_CI_OUTPUT_DIR=str(out),
               COMPILE_CI_CHECKOUT=str(checkout), TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "cache"))
    command = [*pytest_command(sys.executable, tmp_path / "junit.xml"), str(checkout / "tests")]
    done = subprocess.run(command, cwd=checkout, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    assert json.loads((out / "surface.json").read_text()) == {"fingerprint": "", "reuse": "", "changes": [],
                                                                  "omitted": 0}


def test_native_code_torch_files_and_the_record(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    (checkout / "build").mkdir(parents=True)
    library = checkout / "build" / "libstack_ops.so"  # a shared object of the repository's (a copy of zlib)
    shutil.copy(next(p for p in (Path("/lib/x86_64-linux-gnu/libz.so.1"), Path("/usr/lib/x86_64-linux-gnu/libz.so.1"))
                     if p.exists()), library)
    (checkout / "planted.py").write_text("def helper(x):\n    return x\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "COMPILE_CI_CHECKOUT": str(checkout)}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(checkout / "planted.py"), str(library), str(tmp_path)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=checkout)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["stock"] == "" and ["torch._inductor.planted", "torch files differ"] in [
        change[:2] for change in seen["planted"]], seen["planted"]
    many = json.loads((tmp_path / "many.json").read_text())
    assert len(many["changes"]) == 200 and many["omitted"] >= 50, (len(many["changes"]), many["omitted"])
    assert all(len(change["place"]) <= 300 for change in many["changes"])
    assert seen["before native"] and not seen["before native"].startswith("native-")  # the planted module's file
    assert seen["native"].startswith("native-") and seen["tag"] == f"compile-ci-surface-{seen['native']}"
    assert ["native libstack_ops.so", "native code", "build/libstack_ops.so"] in seen["native changes"]
    assert "loaded native code of its own (libstack_ops.so)" in done.stderr
    assert "bypasses the compile cache" in done.stderr
    record = json.loads((tmp_path / "native.json").read_text())
    assert record["fingerprint"] == seen["native"]
    assert {"place": "native libstack_ops.so", "kind": "native code", "where": "build/libstack_ops.so"} in \
        record["changes"]
