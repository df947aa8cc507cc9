"""A job's container started before its job (runners/docker_prestart.py): the imports every job's process pays,
made while no job waits, and nothing of any repository run before the job's own command.

A fresh job's process (`python -m suites.pytest_entry ...`) imports torch and the compiler surface's snapshot
(`prepare()`), pytest and the plugin's modules, and then, in pytest's configure hooks, dynamo
(suites/coverage.py reads its counters): about 2.5 s of a 4.3 s shard overhead on a quiet 2-core host
(docs/benchmarks.md, "a job's fixed cost"). For the built-in suites, no code of the repository runs before those
hooks but its install step, which runs in processes of its own: the runner only sends jobs whose `-p` plugins are
compile-ci's or pytest's, with no PYTEST_ADDOPTS/PYTEST_PLUGINS. So this process makes exactly those imports, in the
job's container, with the job's environment but for its per-job variables (COMPILE_CI_*, which the runner sends
with the command), and records every variable they read. Then it reads one line from stdin, `{"argv": [...],
"env": {...}}` (`python -m suites.warm_container [IDLE_S]`: unclaimed after IDLE_S, it ends), does the
install step's work if the job has one (suites/warm_install.py, as a LocalRunner's forked job
does: then this process is set up as the step's `exec` would start it, or that `exec` happens), and becomes the job.

It starts the job's command fresh instead (`exec`, a line in the log says why) whenever the order could show:
- the imports read a per-job variable other than the ones `compiler_surface.forked()` takes again;
- the install step added a module named like one they imported or looked for, or a `.pth` that runs code
  (suites/warm_install.py);
- a module they imported would now be found first elsewhere on the job's path (the checkout, filled after they
  ran, on PYTHONPATH), or a `sitecustomize`/`usercustomize` would now be found;
- the pytest plugins installed distributions declare (entry points, `pytest11`) differ from those at warm-up.

One container, one job: it is never reused, and a job cannot reach the next one's (runners/docker_prestart.py).
"""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import json
import os
import select
import shutil
import sys
from typing import Any

SHARED = frozenset({"COMPILE_CI_SOURCE_KEYS"})  # compile-ci variables the same for every job of an image
RETAKEN = frozenset({"COMPILE_CI_CHECKOUT"})  # read by compiler_surface.install(), taken again by forked()
CUSTOMIZE = ("sitecustomize", "usercustomize")
LINE_MAX = 1 << 20


def per_job(name: str) -> bool:
    return name.startswith("COMPILE_CI_") and name not in SHARED


class _Reads(os._Environ):  # type: ignore[misc,type-arg]
    """os.environ that remembers what was read (and "*" when it was read whole)."""

    seen: set[str]

    def __getitem__(self, key: str) -> str:
        self.seen.add(key)
        return super().__getitem__(key)

    def __iter__(self) -> Any:
        self.seen.add("*")
        return super().__iter__()


def warm_up() -> tuple[set[str], list[str]]:
    """What a fresh job's process imports before pytest's configure hooks have run; (variables read, warnings)."""
    real = os.environ
    recording = _Reads(real._data, real.encodekey, real.decodekey, real.encodevalue,  # type: ignore[attr-defined]
                       real.decodevalue)  # type: ignore[attr-defined]
    recording.seen = set()
    os.environ = recording  # noqa: B003 - the same variables, read through a recorder
    try:
        from suites import warm_process

        _why, _late, shown = warm_process.warm_up()
        import torch._dynamo.utils  # noqa: F401 - suites/coverage.py's pytest_configure imports it
    finally:
        os.environ = real  # noqa: B003
    return recording.seen, shown


def _plugins() -> set[str]:
    return {f"{ep.name}={ep.value}" for ep in importlib.metadata.entry_points(group="pytest11")}


def variables_read(read: set[str]) -> str:
    """Why the imports' start could differ from a fresh process's, by what they read ('' when it could not)."""
    if "*" in read:
        return "the imports read the whole environment"
    variables = sorted(name for name in read if per_job(name) and name not in RETAKEN)
    return f"the imports read the job's own {', '.join(variables)}" if variables else ""


def unsure(read: set[str], plugins: set[str]) -> str:
    """Why the job must start fresh ('' when its start would not differ from a fresh process's)."""
    if why := variables_read(read):
        return why
    importlib.invalidate_caches()
    for name in CUSTOMIZE:
        if name not in sys.modules and importlib.machinery.PathFinder.find_spec(name, sys.path) is not None:
            return f"a {name} module is on the job's path"
    for name, module in list(sys.modules.items()):
        origin = getattr(getattr(module, "__spec__", None), "origin", None)
        if "." in name or not origin or origin in ("built-in", "frozen"):
            continue
        found = importlib.machinery.PathFinder.find_spec(name, sys.path)
        if found is not None and found.origin != origin:
            return f"{name} would be imported from {found.origin}"
    if _plugins() != plugins:
        return "pytest plugins were installed after the imports"
    return ""


def split(argv: list[str]) -> tuple[list[str] | None, list[str]]:
    """(the install step's source and arguments, or None; the job's own command): a wrapped job is `python -c STEP
    CHECKOUT SITE PACKAGE -- COMMAND` (service/jobs/install.py)."""
    if len(argv) > 3 and argv[1] == "-c" and "--" in argv[3:]:
        cut = argv.index("--", 3)
        return [*argv[2:cut], "--", *argv[cut + 1:]], argv[cut + 1:]
    return None, argv


def _fresh(why: str, command: list[str]) -> None:
    sys.stderr.write(f"compile-ci: the job starts in a fresh process: {why}\n")
    sys.stderr.flush()
    os.execvp(command[0], command)


def _become(command: list[str], shown: list[str]) -> int:
    null = os.open(os.devnull, os.O_RDONLY)  # a fresh job's stdin
    os.dup2(null, 0)
    os.close(null)
    sys.stderr.write("".join(shown))
    from suites import pytest_entry

    sys.argv = [pytest_entry.__file__, *command[3:]]
    return pytest_entry.main(forked=True)


def main() -> int:
    startup = dict(os.environ)
    read, shown = warm_up()
    imports = {k: v for k, v in os.environ.items() if startup.get(k) != v}  # what the imports set
    plugins = _plugins()
    idle_s = float(sys.argv[1]) if len(sys.argv) > 1 else None  # unclaimed this long: the container ends
    if not select.select([sys.stdin], [], [], idle_s)[0]:
        return 0
    line = sys.stdin.buffer.readline(LINE_MAX)
    if not line.endswith(b"\n"):
        return 0  # not claimed (stdin closed): the container goes unused
    request = json.loads(line)
    argv = [str(arg) for arg in request["argv"]]
    os.environ.update({str(k): str(v) for k, v in request["env"].items()})
    step, command = split(argv)
    if command[1:3] != ["-m", "suites.pytest_entry"]:
        _fresh("not compile-ci's pytest", argv)
    if why := variables_read(read):
        _fresh(why, argv)
    from suites import warm_install

    imported = {name.partition(".")[0] for name in sys.modules}
    sys.meta_path[:] = [finder for finder in sys.meta_path if finder is not warm_install.LOOKED_FOR]
    if step is not None:  # its work done here; then this process as its exec would start, or that exec
        python = shutil.which(command[0]) or command[0]
        command = [*command[:3], *warm_install.run_step(step, imported, python, lambda env: {**env, **imports},
                                                        startup.get("PYTHONPATH", ""))]
    if why := unsure(read, plugins):
        _fresh(why, command)
    return _become(command, shown)


if __name__ == "__main__":
    sys.exit(main())
