"""Any change to torch's compiler is a change of the key and aims the sweep at every op: sampled at random.

In a fresh interpreter (as a job has one; torch's state stays clean for the other tests), the compiler surface is
installed before the compiler packages are imported; then places are picked at random across those packages
(seeded: COMPILE_CI_SURFACE_SEED, printed; COMPILE_CI_SURFACE_SAMPLES of them, at least 40), one kind of change at
a time — a module function, a method, a staticmethod, a classmethod, a property, a class attribute, a `__code__`
swap, a wrapping decorator, a class replaced in its module, a module replaced in `sys.modules`, defaults,
keyword defaults, a closure cell, the handler or extra check of an entry of one of torch's pattern passes (after
torch's own lazy registrations, which change nothing). For each: the fingerprint is no longer empty, `changes()` names
the place (and the repository's file where its code is the repository's), the op sweep aims at every op, `restored()`
puts torch's own object back for its body (a pattern entry: names it among what it cannot undo) and the repository's
after; and once the change is undone, the fingerprint is empty again.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KINDS = ("module function", "method", "staticmethod", "classmethod", "property", "class attribute", "code swap",
         "decorator", "class replaced", "module replaced", "defaults", "kwdefaults", "closure cell", "pattern entry")
PATCHES = '''
import functools, types


def wrap(fn):
    @functools.wraps(fn)
    def patched(*args, **kwargs):
        return fn(*args, **kwargs)
    return patched


def plain(fn):
    def replacement(*args, **kwargs):
        return fn(*args, **kwargs)
    return replacement


def subclass(cls):
    class Replacement(cls):
        def repository_marker(self):
            return "repository"
    Replacement.__module__, Replacement.__qualname__ = cls.__module__, cls.__qualname__
    return Replacement


def stand_in(name):
    module = types.ModuleType(name)
    module.repository_marker = plain(print)
    return module
'''


def test_any_change_in_the_compiler_packages_changes_the_key_and_aims_at_every_op(tmp_path: Path) -> None:
    seed = int(os.environ.get("COMPILE_CI_SURFACE_SEED") or random.randrange(2**32))
    samples = max(40, int(os.environ.get("COMPILE_CI_SURFACE_SAMPLES") or 52))
    print(f"compiler surface property: seed {seed} (COMPILE_CI_SURFACE_SEED={seed} replays it), {samples} places")
    (tmp_path / "repository_patches.py").write_text(PATCHES)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(tmp_path)]),
           "COMPILE_CI_CHECKOUT": str(tmp_path)}
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("surface_sampler.py")), str(seed),
                           str(samples)], capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert done.returncode == 0, f"seed {seed}: " + done.stdout[-3000:] + done.stderr[-5000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    failures = [sample for sample in report["samples"] if sample["problems"]]
    assert not failures, f"seed {seed}: " + json.dumps(failures, indent=1)[:6000]
    assert report["stock"] == "" and report["after"] == "", f"seed {seed}: {report['stock']!r} {report['after']!r}"
    counted = {kind: sum(s["kind"] == kind for s in report["samples"]) for kind in KINDS}
    assert len(report["samples"]) >= 40 and all(counted.values()), f"seed {seed}: {counted}"
    packages = {sample["package"] for sample in report["samples"]}
    assert len(packages) >= 6, f"seed {seed}: the samples came from {sorted(packages)} only"
    fingerprints = [sample["fingerprint"] for sample in report["samples"]]
    assert len(set(fingerprints)) == len(fingerprints), f"seed {seed}: two changes, one key"
