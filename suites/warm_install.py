"""A job with an install step, forked from a warm interpreter (suites/warm_process.py): the step's work done in the
job's own process, then the interpreter's start that the step's `exec` would have given it, or that `exec` itself.

A wrapped job is `python -c STEP CHECKOUT SITE PACKAGE -- python -m suites.pytest_entry ...`
(service/jobs/install.py, install_step.py). Fresh, the step installs the repository, writes a boot directory whose
sitecustomize adds the site directories, and execs the command with PYTHONPATH = boot, SITE, the old value: the new
interpreter starts with those on its path and their `.pth` files run before torch is imported. Forked, torch is
imported already, so the same start is faithful only when nothing on the new paths could have changed what the warm
interpreter's imports found:
- no top-level module or package there named like one the warm interpreter imported or looked for and did not find
  (a requirement's own numpy, a repository's package named like an optional module torch tries);
- no `.pth` line that runs code, but the finder line of an editable install (`import __editable___*_finder; ...`),
  which adds an import hook for the repository's own packages and touches nothing imported.
Otherwise (and when the step is not the step it expects) the child execs the command exactly as the step would have:
the job is a fresh one, in the same process, with the step's work already done.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterable
from typing import Any

ENTRY = ["-m", "suites.pytest_entry"]
_EDITABLE = re.compile(r"import (__editable___\w+_finder); \1\.install\([^()]*\)")
_SUFFIXES = (".py", ".pyc", ".so", ".pyd", ".pth")


class LookedFor:
    """A finder at the end of `sys.meta_path` that finds nothing and remembers what every other finder did not
    find: the modules the warm interpreter's imports tried and went without."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        self.names.add(fullname.partition(".")[0])
        return None


LOOKED_FOR = LookedFor()


def run_step(step: list[str], imported: set[str], python: str, imports_on: Callable[[dict[str, str]], dict[str, str]],
             pythonpath: str) -> list[str]:
    """The step's work; then the job's own arguments (after `-m suites.pytest_entry`) with this process set up as
    the step's exec would have started it, or no return: the exec, when that start cannot be given faithfully.
    `python`: the runner's, which the exec goes through (a wrapper script may set variables: it runs to say what);
    `imports_on`: an environment with what the warm-up's imports set; `pythonpath`: the warm interpreter's
    PYTHONPATH at its start."""
    source, argv = step[0], step[1:]
    namespace: dict[str, Any] = {"__name__": "compile_ci_install_step"}
    exec(compile(source, "<install step>", "exec"), namespace)  # noqa: S102 - the job's own step, in its process
    if "plan" not in namespace:
        _afresh("the install step is not one it knows")
        python = argv[argv.index("--") + 1]
        os.execvp(python, [python, "-c", source, *argv])
    command, env, site_dirs = namespace["plan"](argv)
    boot = env["PYTHONPATH"].split(os.pathsep)[0]
    started = _through(python, env)
    if started is None:
        _afresh(f"{python} did not say what it sets")
        os.execvpe(command[0], command, env)
    env = imports_on(started)
    # The repository's own packages too: an editable install's finder maps them from its checkout (or src/).
    checkout = env.get("COMPILE_CI_CHECKOUT", "")
    roots = [checkout, os.path.join(checkout, "src")] if checkout else []
    why = "its command is not compile-ci's" if command[1:3] != ENTRY else ""
    if why := why or shadowed([*site_dirs, *roots], imported | LOOKED_FOR.names):
        _afresh(why)
        os.execvpe(command[0], command, env)
    _start_like(env, boot, pythonpath)
    return command[3:]


def _through(python: str, env: dict[str, str]) -> dict[str, str] | None:
    """The environment `python` starts its interpreter with, given `env`: itself when it is this interpreter; None
    when it cannot say."""
    if not python or os.path.realpath(python) == os.path.realpath(sys.executable):
        return env
    import json
    import subprocess

    try:
        shown = subprocess.run([python, "-c", "import json, os; print(json.dumps(dict(os.environ)))"], env=env,
                               capture_output=True, text=True, timeout=60, check=True)
        started = json.loads(shown.stdout)
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    return started if isinstance(started, dict) else None


def _afresh(why: str) -> None:
    print(f"[compile-ci] the job starts a fresh interpreter after its install step: {why}", flush=True)


def shadowed(site_dirs: Iterable[str], names: set[str]) -> str:
    """What on the new paths could change an import the warm interpreter made or tried ('' when nothing)."""
    for site in site_dirs:
        for entry in _entries(site):
            if entry.endswith(".pth"):
                if why := _pth(os.path.join(site, entry), names):
                    return why
            elif _module_name(entry) in names:
                return f"{os.path.join(site, entry)} is named like a module the warm interpreter looked for"
    return ""


def _pth(path: str, names: set[str]) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return f"{path} cannot be read"
    for line in lines:
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        if text.startswith(("import ", "import\t")):
            if not _EDITABLE.fullmatch(text):
                return f"{path} runs code at the interpreter's start"
            continue
        folder = text if os.path.isabs(text) else os.path.join(os.path.dirname(path), text)
        for entry in _entries(folder):
            if _module_name(entry) in names:
                return f"{os.path.join(folder, entry)} is named like a module the warm interpreter looked for"
    return ""


def _entries(folder: str) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except OSError:
        return []


def _module_name(entry: str) -> str:
    if entry.endswith((".dist-info", ".egg-info", ".egg-link")) or entry == "__pycache__":
        return ""
    name = entry.partition(".")[0] if entry.endswith(_SUFFIXES) else entry
    return name if name.isidentifier() else ""


def _start_like(env: dict[str, str], boot: str, pythonpath: str) -> None:
    """This process as `python -m ...` with `env` would start: the environment, the path (the directory, then
    PYTHONPATH's entries, then the interpreter's own), and the boot directory's sitecustomize run if it is on it
    (a wrapper script that sets PYTHONPATH itself leaves it out)."""
    before = [os.path.abspath(p) for p in pythonpath.split(os.pathsep) if p]
    os.environ.clear()
    os.environ.update(env)
    added = [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    own = [p for p in sys.path[1:] if p not in before]
    path: list[str] = []
    for entry in [os.getcwd(), *added, *own]:
        if entry not in path:
            path.append(entry)
    sys.path[:] = path
    if os.path.abspath(boot) not in added:
        return
    import importlib.util

    spec = importlib.util.spec_from_file_location("sitecustomize", os.path.join(boot, "sitecustomize.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)
