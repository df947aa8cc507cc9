"""The compiler-surface fingerprint (suites/compiler_surface.py) in a fresh interpreter, as a job has one: nothing
changed is no tag at all; each kind of run-time change is a tag, the same change the same tag; the repository's own
tag is kept. The whole flow (warm cache, broken patch, red) runs through the service in
tests/integration/test_cache_verdicts.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = '''
import json, sys
sys.path.insert(0, {repo!r}); sys.path.insert(0, {patches!r})
from suites import compiler_surface as surface
surface.install()
import torch
import torch._inductor.lowering, torch._inductor.decomposition, torch._inductor.pattern_matcher
from torch._inductor import config
from torch._inductor.lowering import lowerings
from torch._inductor.decomposition import decompositions
aten = torch.ops.aten
seen = {{"stock": surface.fingerprint()}}
sin = lowerings[aten.sin.default]
lowerings[aten.sin.default] = lowerings[aten.cos.default]  # a torch function, under another op
seen["lowering"] = surface.fingerprint()
lowerings[aten.sin.default] = sin
seen["restored"] = surface.fingerprint()
import patches_v1
decompositions[aten.sinh.default] = patches_v1.sinh
seen["decomposition v1"] = surface.fingerprint()
import patches_v2
decompositions[aten.sinh.default] = patches_v2.sinh
seen["decomposition v2"] = surface.fingerprint()
del decompositions[aten.sinh.default]
config.post_grad_custom_post_pass = patches_v1.Pass()
seen["pass"] = surface.fingerprint()
config.post_grad_custom_post_pass = None
from torch._inductor.codegen.cpp import CppOverrides
stock_sin = CppOverrides.__dict__["sin"]
CppOverrides.sin = staticmethod(patches_v1.cpp_sin)  # the C++ inductor writes for every sin
seen["override"] = surface.fingerprint()
CppOverrides.sin = stock_sin
seen["override restored"] = surface.fingerprint()
import patterns
seen["pattern"] = surface.fingerprint()
torch.compiler.config.cache_key_tag = "theirs"
surface.refresh_tag()
seen["tag"] = torch.compiler.config.cache_key_tag
print(json.dumps(seen))
'''
PATCHES = '''
import torch
from torch._inductor.custom_graph_pass import CustomGraphPass


def _half(x):
    return x * 0.5


def sinh(x):
    return _half(x.exp() - (-x).exp()){suffix}


def cpp_sin(x):
    return f"std::cos({{x}})"


class Pass(CustomGraphPass):
    def __call__(self, graph):
        pass

    def uuid(self):
        return "constant"
'''
PATTERNS = '''
import torch
from torch._inductor.pattern_matcher import PatternMatcherPass, fwd_only, register_replacement

PASS = PatternMatcherPass()


def search(x):
    return x + x


def replace(x):
    return x * 2


register_replacement(search, replace, [torch.ones(2)], fwd_only, PASS)
'''


def test_fingerprint_of_each_run_time_change(tmp_path: Path) -> None:
    (tmp_path / "patches_v1.py").write_text(PATCHES.format(suffix=""))
    (tmp_path / "patches_v2.py").write_text(PATCHES.format(suffix=" + 0"))  # one helper-level edit: another file
    (tmp_path / "patterns.py").write_text(PATTERNS)
    script = textwrap.dedent(SCRIPT.format(repo=str(REPO), patches=str(tmp_path)))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    # Nothing changed, or every change undone: the untagged key, every hit kept.
    assert seen["stock"] == seen["restored"] == seen["override restored"] == "", seen
    changed = [seen[k] for k in ("lowering", "decomposition v1", "decomposition v2", "pass", "override", "pattern")]
    assert all(changed) and len(set(changed)) == len(changed), seen
    assert seen["tag"] == f"theirscompile-ci-surface-{seen['pattern']}"


EARLY_PATCH = '''
import torch
from torch._inductor.lowering import lowerings

_stock = lowerings[torch.ops.aten.{op}.default]


def lowering(x):
    return _stock(x)


lowerings[torch.ops.aten.{op}.default] = lowering
'''
PROBE = '''
import json, os

from suites import compiler_surface


def test_probe():
    keys = sorted(str(key) for _table, key, _line in compiler_surface.changed_entries())
    with open(os.environ["PROBE_OUT"], "w") as out:
        json.dump({"keys": keys, "fingerprint": compiler_surface.fingerprint()}, out)
'''


def test_plugins_pytest_imports_before_any_hook_are_not_taken_for_stock(tmp_path: Path) -> None:
    """pytest imports the repository's `addopts = -p ...` plugins and every installed distribution's `pytest11` entry
    point before its first hook: a lowering patched there, run the way a job runs pytest, changes the fingerprint."""
    from service.jobs.pipeline import pytest_command

    checkout, site = tmp_path / "checkout", tmp_path / "site"
    (site / "patcher-0.1.dist-info").mkdir(parents=True)
    (site / "patcher-0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: patcher\nVersion: 0.1\n")
    (site / "patcher-0.1.dist-info" / "entry_points.txt").write_text("[pytest11]\npatcher = entry_patch\n")
    (site / "entry_patch.py").write_text(EARLY_PATCH.format(op="cos"))
    checkout.mkdir()
    (checkout / "pytest.ini").write_text("[pytest]\naddopts = -p addopts_patch\n")
    (checkout / "addopts_patch.py").write_text(EARLY_PATCH.format(op="sin"))
    (checkout / "test_probe.py").write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPILE_CI_", "PYTEST_"))}
    env.update(PYTHONPATH=os.pathsep.join([str(REPO), str(site), str(checkout)]), PROBE_OUT=str(tmp_path / "seen"),
               COMPILE_CI_OUTPUT_DIR=str(tmp_path / "out"), COMPILE_CI_CHECKOUT=str(checkout))
    command = [*pytest_command(sys.executable, tmp_path / "junit.xml"), str(checkout / "test_probe.py")]
    done = subprocess.run(command, cwd=checkout, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    seen = json.loads((tmp_path / "seen").read_text())
    assert seen["keys"] == ["aten.cos.default", "aten.sin.default"] and seen["fingerprint"], seen
