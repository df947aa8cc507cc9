"""suites/warm_container.py's judgement of when a pre-started container's early imports could differ from a fresh
process's: run in a fresh interpreter (the test process's own path and modules are pytest's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import json, sys
from suites.warm_container import _plugins, unsure
plugins = _plugins()
read = set(json.loads(sys.argv[1]))
if sys.argv[2]:
    sys.path.insert(0, sys.argv[2])
if sys.argv[3] == "more":
    plugins = plugins | {"extra=somewhere"}
print(unsure(read, plugins))
"""


def _unsure(read: list[str], first_on_path: Path | None = None, plugins: str = "") -> str:
    import json

    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(read), str(first_on_path or ""), plugins],
                          capture_output=True, text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin"},
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_imports_may_read_shared_variables_and_the_checkout_variable_only() -> None:
    assert _unsure(["HOME", "TORCHINDUCTOR_FREEZING", "COMPILE_CI_CHECKOUT", "COMPILE_CI_SOURCE_KEYS"]) == ""
    assert _unsure(["COMPILE_CI_DEADLINE", "HOME"]) == "the imports read the job's own COMPILE_CI_DEADLINE"
    assert _unsure(["*"]) == "the imports read the whole environment"


def test_a_module_the_imports_took_that_the_job_would_find_elsewhere_starts_it_fresh(tmp_path: Path) -> None:
    (tmp_path / "json").mkdir()
    (tmp_path / "json" / "__init__.py").write_text("")
    assert _unsure([], tmp_path) == f"json would be imported from {tmp_path / 'json' / '__init__.py'}"
    (tmp_path / "an_unimported_name.py").write_text("")
    assert _unsure([], tmp_path / "nothing-here") == ""


def test_pytest_plugins_installed_after_the_imports_start_the_job_fresh() -> None:
    assert _unsure([], plugins="more") == "pytest plugins were installed after the imports"


def test_a_container_nobody_claims_ends_by_itself() -> None:
    """Its worker may be gone (a bench or a worker that exited without closing it): after IDLE_S it ends, stdin
    still open and silent."""
    proc = subprocess.Popen([sys.executable, "-m", "suites.warm_container", "0.5"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT,
                            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin", "HOME": "/tmp"})
    try:
        assert proc.wait(timeout=180) == 0, proc.stdout.read() if proc.stdout else ""
    finally:
        proc.kill()
        assert proc.stdin is not None
        proc.stdin.close()


SAMPLED = """
import json, os, random, sys, tempfile
import torch._dynamo.utils  # what a pre-started container imported (suites/warm_container.py's warm_up)
from suites.warm_container import _plugins, unsure
plugins = _plugins()
names = sorted(n for n, m in sys.modules.items() if "." not in n and not n.startswith("_")
               and getattr(getattr(m, "__spec__", None), "origin", None) not in (None, "built-in", "frozen"))
chosen = random.Random(int(sys.argv[1])).sample(names, 12)
missed = []
for name in chosen:
    with tempfile.TemporaryDirectory() as root:
        os.mkdir(os.path.join(root, name))
        open(os.path.join(root, name, "__init__.py"), "w").close()
        sys.path.insert(0, root)
        try:
            if "would be imported from" not in unsure(set(), plugins):
                missed.append(name)
        finally:
            sys.path.remove(root)
print(json.dumps({"chosen": chosen, "missed": missed, "of": len(names)}))
"""


def test_any_module_the_imports_took_shadowed_on_the_job_path_starts_it_fresh() -> None:
    """The property over every top-level module a container imported (torch, dynamo, pytest, the plugin and what
    they pulled in), sampled at random (seeded, printed): a package of that name first on the job's path is seen."""
    import json
    import random

    seed = random.SystemRandom().randrange(1 << 30)
    print(f"seed {seed}")
    done = subprocess.run([sys.executable, "-c", SAMPLED, str(seed)], capture_output=True, text=True, cwd=ROOT,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin", "HOME": "/tmp"}, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    print(found)
    assert found["of"] > 100 and found["missed"] == [], f"seed {seed}: {found}"
