"""The fingerprint a job's reused results are checked by is a fact about the repository's code, not about which of
its tests a process ran (found on the GPU host: a real-model pull request's shards disagreed, so every reuse was
refuted and the jobs ran again whole).

A sample repository with its own package and tests, and an installed requirement of its own (a site directory with
its distribution's metadata) that adds a method to `torch.nn.Module` when a model is made, as transformers does. Run
as three shards would (`-k`):
- importing `torch.onnx.symbolic_helper` (as torchvision does) binds torch's own submodule: no change at all;
- the installed requirement's patch is a change (it keys the caches) but not one the `reuse` fingerprint counts: a
  process that made no such model and one that did agree;
- the repository's own patch counts in both.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .repo_run import run_repo_tests
from .suite_run import REPO

REQUIREMENT = '''
import torch


def build():
    if not hasattr(torch.nn.Module, "smart_apply"):
        def smart_apply(self, fn):  # added when a model is made, as transformers' modeling_utils does
            return self.apply(fn)

        torch.nn.Module.smart_apply = smart_apply
    return torch.nn.Linear(4, 4)
'''
OWN = '''
import torch._inductor.lowering as lowering

_stock = lowering.make_fallback


def apply():
    def make_fallback(*args, **kwargs):  # the repository's own wrapper of one of inductor's functions
        return _stock(*args, **kwargs)

    lowering.make_fallback = make_fallback
'''
TESTS = '''
import torch


def test_uses_the_onnx_helper():
    import torch.onnx.symbolic_helper  # noqa: F401 - what torchvision imports

    assert torch.compile(lambda x: x + 1)(torch.ones(2)).sum().item() == 4


def test_makes_an_installed_model():
    import realmodels

    assert torch.compile(realmodels.build())(torch.ones(1, 4)).shape == (1, 4)


def test_plain():
    assert torch.compile(lambda x: x * 2)(torch.ones(2)).sum().item() == 4


def test_own_patch():
    from zoo import own

    own.apply()
    assert torch.compile(lambda x: x - 1)(torch.ones(2)).sum().item() == 0
'''


def test_the_reuse_fingerprint_does_not_depend_on_the_tests_a_process_ran(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    (site / "realmodels-1.0.dist-info").mkdir(parents=True)
    (site / "realmodels-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: realmodels\n"
                                                                "Version: 1.0\n")
    (site / "realmodels").mkdir()
    (site / "realmodels" / "__init__.py").write_text(REQUIREMENT)
    checkout = tmp_path / "repo"
    (checkout / "zoo").mkdir(parents=True)
    (checkout / "tests").mkdir()
    (checkout / "zoo" / "__init__.py").write_text("")
    (checkout / "zoo" / "own.py").write_text(OWN)
    (checkout / "conftest.py").write_text("import os, sys\nsys.path.insert(0, os.path.dirname(__file__))\n")
    (checkout / "tests" / "test_models.py").write_text(TESTS)
    path = os.pathsep.join(filter(None, [str(REPO), str(site), os.environ.get("PYTHONPATH")]))
    records = {}
    for name, selection in (("base", "not own_patch"), ("onnx", "onnx"), ("own", "own_patch")):
        run = run_repo_tests(checkout, tmp_path / name, {"PYTHONPATH": path}, args=["-k", selection])
        assert run.returncode == 0, run.describe()
        records[name] = json.loads((run.out / "surface.json").read_text())
    base, onnx, own = records["base"], records["onnx"], records["own"]
    assert onnx == {"fingerprint": "", "reuse": "", "changes": [], "omitted": 0}, onnx
    added = [c for c in base["changes"] if c["place"].endswith("Module.smart_apply")]
    assert added and added[0]["kind"] == "added" and added[0]["where"].startswith(str(site.resolve())), base
    assert base["fingerprint"] != "" and base["reuse"] == "", base
    assert own["fingerprint"] == own["reuse"] != "", own
    assert any(c["where"].startswith("zoo/own.py") for c in own["changes"]), own
