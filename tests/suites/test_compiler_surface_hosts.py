"""The compiler surface on a GPU host as it is laid out, where stock torch must still be no change (issue 38).

Seen on an H100 host (torch 2.11, Python 3.12) and replayed here: the runner's venv reaches the host's CUDA torch
through a path file (`.pth`) of its site directory, so torch, CUDA's libraries, triton and numpy are not in the
interpreter's own directories; triton builds its launcher stubs in its own cache (~/.triton/cache); torch's C++ sets
`torch.cuda.default_generators` at CUDA's initialisation; and inductor adds libdevice routers over
TritonOverrides' methods when it makes its first Triton kernel. Each of those made stock torch a change (a key of
its own in every job, the op sweep aimed at every op): none may be, and a real change must still be one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
# The site directory torch was imported from: the interpreter's own here; on a GPU host whose runner venv reaches the
# host's torch through a path file, that host venv's (not this interpreter's purelib).
TORCH_SITE = os.path.dirname(os.path.dirname(torch.__file__))
SCRIPT = '''
import json, functools, sys
from suites import compiler_surface as surface
surface.install()
import torch
import torch._inductor.compile_fx
seen = {"stock": surface.fingerprint(), "changes": [[c.place, c.kind] for c in surface.changes()]}
f = torch.compile(lambda x: torch.sin(x) * 2)
f(torch.randn(8))
seen["compiled"] = surface.fingerprint()
from torch._inductor.codegen.triton import TritonKernelOverrides
TritonKernelOverrides._setup_libdevice_routing()  # what inductor does at its first Triton kernel
import torch.cuda
torch.cuda.default_generators = (torch.Generator(),)  # what CUDA's initialisation does from C++
seen["routed"] = [[c.place, c.kind] for c in surface.changes()]
import rebind
seen["rebound"] = [[c.place, c.kind] for c in surface.changes()]
print(json.dumps(seen))
'''
REBIND = '''import functools
from torch._inductor.codegen import triton


def router(x, _original_impl):
    return _original_impl(x)


# The repository's own router, added as torch's are: a change (its code is the repository's).
triton.TritonKernelOverrides.exp = staticmethod(functools.partial(router, _original_impl=triton.TritonOverrides.exp))
'''


def run(python: str, tmp_path: Path, env: dict[str, str]) -> dict[str, object]:
    (tmp_path / "pkg").mkdir(exist_ok=True)
    (tmp_path / "pkg" / "rebind.py").write_text(REBIND)
    env = {**os.environ, **env, "COMPILE_CI_CHECKOUT": str(tmp_path / "pkg")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(tmp_path / "pkg"), *filter(None, [env.get("EXTRA_PATH")])])
    done = subprocess.run([python, "-c", SCRIPT], capture_output=True, text=True, timeout=600, env=env,
                          cwd=tmp_path / "pkg")
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_runner_venv_over_the_hosts_torch_is_stock_and_a_change_is_still_one(tmp_path: Path) -> None:
    venv = tmp_path / "runner-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    site_dir = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
    hosts = TORCH_SITE  # torch, numpy, ... as the host's venv holds them
    Path(site_dir, "host-torch.pth").write_text(f"# the host's CUDA torch\n{hosts}\n")
    seen = run(python, tmp_path, {})
    assert seen["stock"] == "" and seen["changes"] == [] and seen["compiled"] == "", seen
    assert seen["routed"] == [], seen
    assert seen["rebound"] == [["torch._inductor.codegen.triton.TritonKernelOverrides.exp", "added"]], seen


def test_a_torch_put_on_the_path_by_the_environment_is_not_the_runners(tmp_path: Path) -> None:
    # The same torch, reached through PYTHONPATH rather than the interpreter's own path files: not the runner's.
    venv = tmp_path / "runner-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    seen = run(str(venv / "bin" / "python"), tmp_path, {"EXTRA_PATH": TORCH_SITE})
    assert ["torch", "torch files differ"] in seen["changes"] and seen["stock"], seen


EARLIER_COMPILE = '''
import json
import torch

f = torch.compile(lambda x: torch.sin(x) + 1)
f(torch.randn(8))  # a kernel of inductor's loaded as torch._inductor.runtime.compile_tasks.<key>
from suites import compiler_surface as surface
surface.install()
from torch._inductor.codecache import PyCodeCache
PyCodeCache.cache_clear()  # as a test's fresh compile state does: the kernel is loaded again, a new module
torch._dynamo.reset()
torch.compile(lambda x: torch.sin(x) + 1)(torch.randn(8))
print(json.dumps({"changes": [[c.place, c.kind] for c in surface.changes()], "key": surface.fingerprint()}))
'''


def test_kernels_compiled_before_the_snapshot_are_not_torchs_and_no_change(tmp_path: Path) -> None:
    # A process that compiled before the snapshot (our own test workers do): inductor's generated modules live in
    # sys.modules under torch's names; taken as torch's, their reload read as "torch files differ" and every later
    # compile was keyed as a change (the op sweep then aimed at every op).
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", EARLIER_COMPILE], capture_output=True, text=True, timeout=600,
                          env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"changes": [], "key": ""}, seen
