"""What a job forked after the compiler's imports takes from the warm interpreter (suites/warm_compiler.py), and when
it must start afresh instead: pure parts, in this process.

- Wherever module state holds a path of the warm interpreter's own, the job gets its own path: sampled over random
  shapes of module state (seeded, printed), a second scan finds nothing of the warm interpreter's left, and a path in
  a tuple (which cannot be replaced) is named.
- A variable the imports read by name with another value for the job, a path variable the job lacks, a module that
  iterated the environment and is not known to take only its own prefix, and pytest plugins an install step added:
  each is a reason to start afresh.
"""

from __future__ import annotations

import os
import random
import sys
import types
from pathlib import Path

import pytest

from runners import first_code
from suites import warm_compiler
from suites.warm_compiler import Ahead

PRIVATE = "/tmp/compile-ci-warm-abc123"
MINE = {"HOME": f"{PRIVATE}/home", "TMPDIR": f"{PRIVATE}/home", "TORCHINDUCTOR_CACHE_DIR": f"{PRIVATE}/home/inductor",
        "TRITON_CACHE_DIR": f"{PRIVATE}/home/triton"}
JOB = {"HOME": "/jobs/7.job/tmp", "TMPDIR": "/jobs/7.job/tmp", "TORCHINDUCTOR_CACHE_DIR": "/cache/7/inductor",
       "TRITON_CACHE_DIR": "/cache/7/triton"}


def ahead(**fields: object) -> Ahead:
    return Ahead(private=PRIVATE, mine=dict(MINE), plugins=warm_compiler.plugins(), **fields)  # type: ignore[arg-type]


class Holder:
    def __init__(self, value: object) -> None:
        self.value = value


def _paths(rng: random.Random) -> tuple[str, str]:
    """A path of the warm interpreter's and the one a fresh job computes in its place."""
    suffix = rng.choice(["", "/dynamo", "/torchinductor_root/precompiled_headers", "/.local", "/x/y.json"])
    base = rng.choice([("TORCHINDUCTOR_CACHE_DIR", MINE["TORCHINDUCTOR_CACHE_DIR"]),
                       ("TRITON_CACHE_DIR", MINE["TRITON_CACHE_DIR"]), ("HOME", MINE["HOME"])])
    return base[1] + suffix, JOB[base[0]] + suffix


def _shape(rng: random.Random, depth: int, expected: list[tuple[str, str]]) -> object:
    """A random nest of dicts, lists, sets and objects with the warm interpreter's paths among other values."""
    if depth > 3 or rng.random() < 0.3:
        if rng.random() < 0.5:
            warm, job = _paths(rng)
            expected.append((warm, job))
            return warm if rng.random() < 0.8 else Path(warm)
        return rng.choice(["plain", "/usr/lib", 3, None, 2.5])
    kind = rng.choice(["dict", "list", "set", "object", "key"])
    if kind == "dict":
        return {f"k{i}": _shape(rng, depth + 1, expected) for i in range(rng.randint(1, 3))}
    if kind == "list":
        return [_shape(rng, depth + 1, expected) for _ in range(rng.randint(1, 3))]
    if kind == "set":
        warm, job = _paths(rng)
        expected.append((warm, job))
        return {warm, "other"}
    if kind == "key":
        warm, job = _paths(rng)
        expected.append((warm, job))
        return {warm: _shape(rng, depth + 1, expected)}
    return Holder(_shape(rng, depth + 1, expected))


def _strings(value: object, seen: set[int] | None = None) -> list[str]:
    seen = set() if seen is None else seen
    if isinstance(value, (str, Path)):
        return [str(value)]
    if id(value) in seen:
        return []
    seen.add(id(value))
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in _strings(k, seen) + _strings(v, seen)]
    if isinstance(value, (list, set, tuple)):
        return [s for v in value for s in _strings(v, seen)]
    if isinstance(value, Holder):
        return _strings(value.value, seen)
    return []


def _of(module: types.ModuleType, places: list[warm_compiler.Place],
        fixed: list[str]) -> tuple[list[warm_compiler.Place], list[str]]:
    """What the scan found in `module` only (this test module's own constants name the same directory)."""
    return ([p for p in places if p.where.startswith(f"{module.__name__}.")],
            [f for f in fixed if f.startswith(f"{module.__name__}.")])


@pytest.mark.parametrize("seed", [1, 2, None, None, None])  # None: a seed drawn now (printed)
def test_every_path_of_the_warm_interpreters_in_module_state_becomes_the_jobs(seed: int | None, tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    seed = random.randrange(2**32) if seed is None else seed
    print(f"seed {seed}")
    rng = random.Random(seed)
    expected: list[tuple[str, str]] = []
    module = types.ModuleType("sampled_state_module")
    for index in range(6):
        setattr(module, f"value{index}", _shape(rng, 0, expected))
    monkeypatch.setitem(sys.modules, module.__name__, module)
    places, fixed = _of(module, *warm_compiler.scan(PRIVATE))
    assert fixed == [], (seed, fixed)
    monkeypatch.chdir(tmp_path)
    warm_compiler.retake(ahead(places=places), dict(JOB))
    left = [s for s in _strings(vars(module)) if PRIVATE in s]
    assert left == [], (seed, left)
    found = set(_strings(vars(module)))
    assert all(job in found for _warm, job in expected), (seed, [j for _w, j in expected if j not in found])
    assert _of(module, *warm_compiler.scan(PRIVATE)) == ([], [])


def test_a_path_kept_in_a_tuple_is_named_and_the_rest_of_the_warm_directory_becomes_the_jobs_cwd(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType("tuple_state_module")
    module.pair = ("a", f"{MINE['HOME']}/x")  # type: ignore[attr-defined]
    module.given = f"{PRIVATE}/given.json"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    places, fixed = _of(module, *warm_compiler.scan(PRIVATE))
    assert fixed == ["tuple_state_module.pair[1]"]
    monkeypatch.chdir(tmp_path)
    warm_compiler.retake(ahead(places=places), dict(JOB))
    assert module.given == f"{tmp_path}/given.json"  # type: ignore[attr-defined]


def test_the_environment_the_imports_depended_on_decides_whether_a_job_takes_them(tmp_path: Path) -> None:
    env = {**JOB, "USER": "root", "NETWORKX_BACKEND_PRIORITY": "x"}
    assert warm_compiler.unsure(ahead(read={"USER": "root", "TMPDIR": MINE["TMPDIR"]}), env) == ""
    assert "USER" in warm_compiler.unsure(ahead(read={"USER": "runner"}), env)
    assert "TORCHINDUCTOR_FREEZING" in warm_compiler.unsure(ahead(read={"TORCHINDUCTOR_FREEZING": None}),
                                                            {**env, "TORCHINDUCTOR_FREEZING": "1"})
    missing = {k: v for k, v in env.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    assert "does not set" in warm_compiler.unsure(ahead(read={"TORCHINDUCTOR_CACHE_DIR": "x"}), missing)
    iterated = ahead(iterated={"networkx.utils.backends"}, environ={"NETWORKX_BACKEND_PRIORITY": "x"})
    assert warm_compiler.unsure(iterated, env) == ""
    assert "networkx" in warm_compiler.unsure(iterated, {**env, "NETWORKX_BACKEND_PRIORITY": "y"})
    assert "whole environment" in warm_compiler.unsure(ahead(iterated={"somepkg.config"}), env)
    # An install step that adds a distribution with a pytest plugin: it would run before the configure hooks.
    site = tmp_path / "site"
    info = site / "evilplug-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: evilplug\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pytest11]\nevilplug = evilplug\n")
    before = ahead()
    sys.path.insert(0, str(site))
    try:
        assert "plugins" in warm_compiler.unsure(before, env)
    finally:
        sys.path.remove(str(site))


def test_reads_by_name_and_iterations_are_told_apart() -> None:
    recorded = Ahead()
    source = "import os\nvalues = {k: v for k, v in os.environ.items() if k.startswith('NETWORKX_')}\n"
    with warm_compiler.recorded(recorded):
        os.environ.get("TORCHINDUCTOR_CACHE_DIR")
        os.environ.get("COMPILE_CI_SURELY_UNSET_VARIABLE")
        exec(compile(source, "backends.py", "exec"), {"__name__": "networkx.utils.backends"})  # noqa: S102
    assert recorded.iterated == {"networkx.utils.backends"}
    assert "COMPILE_CI_SURELY_UNSET_VARIABLE" in recorded.read and "TORCHINDUCTOR_CACHE_DIR" in recorded.read
    assert "PATH" not in recorded.read  # read only by the iteration


@pytest.mark.parametrize("command, env, why", [
    (["py", "-m", "suites.pytest_entry", "-p", "suites.plugin", "/srv/suites/correctness"], {}, ""),
    (["py", "-c", "STEP", "/repo", "--", "py", "-m", "suites.pytest_entry", "/srv/suites/fusion"], {}, ""),
    (["py", "-m", "suites.pytest_entry", "/repo/tests"], {}, "the repository's own tests"),
    (["py", "-m", "suites.pytest_entry", "--rootdir=/srv", "/srv/suites"], {}, "the repository's own tests"),
    (["py", "-m", "suites.pytest_entry", "-p", "repo_plugin", "/srv/suites"], {}, "a pytest plugin of its own"),
    (["py", "-m", "suites.pytest_entry", "/srv/suites"], {"PYTEST_ADDOPTS": "-p x"}, "pytest options"),
    (["py", "-m", "pytest", "/srv/suites"], {}, "its command is not compile-ci's pytest"),
])
def test_which_jobs_run_no_code_of_their_repository_before_the_configure_hooks(command: list[str], env: dict[str, str],
                                                                               why: str) -> None:
    found = first_code.repository_code_first(command, "py", env, "/repo")
    assert (found.startswith(why) if why else found == ""), found
