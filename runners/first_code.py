"""Whether any code of the repository can run in a job's process before pytest's configure hooks: pure functions of
the job's command and environment. Where none can, the job's process may start from one that made those hooks'
imports ahead: a pre-started container (runners/docker_prestart.py) or a LocalRunner's warm interpreter that
imported the compiler (runners/warm_start.py, suites/warm_compiler.py).

A built-in suite's job runs `python -m suites.pytest_entry` on compile-ci's own suites with compile-ci's plugin: its
repository's code runs in its install step (a process of its own, or checked by suites/warm_install.py) and in its
tests once they are collected. The repository's own tests (a path inside its checkout, or a `--rootdir`) run its
conftest files first; a `-p` plugin that is not compile-ci's, or PYTEST_ADDOPTS/PYTEST_PLUGINS, could run anything.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

ENTRY = "suites.pytest_entry"
UNSAFE_VARIABLES = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")
SHADOW_SCAN_LIMIT = 20_000


def job_command(command: Sequence[str]) -> list[str]:
    """The job's own command, behind its install step if it has one (`python -c STEP ... -- COMMAND`,
    service/jobs/install.py)."""
    command = list(command)
    if len(command) > 3 and command[1] == "-c" and "--" in command[3:]:
        command = command[command.index("--", 3) + 1:]
    return command


def repository_code_first(command: Sequence[str], python: str, env: Mapping[str, str], checkout: str) -> str:
    """Why code of the repository (or not compile-ci's) could run before the job's configure hooks ('' when none
    can)."""
    command = job_command(command)
    if command[:3] != [python, "-m", ENTRY]:
        return "its command is not compile-ci's pytest"
    if "--rootdir" in command or any(arg.startswith("--rootdir=") for arg in command) or (checkout and any(
            _within(part, checkout) for arg in command for part in (arg, arg.partition("=")[2]))):
        return "the repository's own tests (its conftest runs before pytest's configure hooks)"
    plugins = [command[i + 1] for i, arg in enumerate(command[:-1]) if arg == "-p"]
    plugins += [arg[2:] for arg in command if arg.startswith("-p") and len(arg) > 2]
    if any(not (name.startswith("no:") or name == "suites" or name.startswith("suites.")) for name in plugins):
        return "a pytest plugin of its own"
    if any(name in env for name in UNSAFE_VARIABLES):
        return "pytest options from its environment"
    return ""


def shadows(checkout: str, late: frozenset[str]) -> bool:
    """Whether the checkout holds a module or package named like one the warm interpreter imported after torch (or
    more entries than are worth reading: then say yes)."""
    if not checkout or not late:
        return False
    seen = 0
    for _root, dirs, files in os.walk(checkout):
        seen += len(dirs) + len(files)
        if seen > SHADOW_SCAN_LIMIT:
            return True
        names = set(dirs) | {name.partition(".")[0] for name in files if name.endswith((".py", ".so", ".pyc"))}
        if names & late:
            return True
        dirs[:] = [d for d in dirs if not d.startswith(".")]
    return False


def _within(path: str, directory: str) -> bool:
    directory = directory.rstrip(os.sep)
    return path == directory or path.startswith(f"{directory}{os.sep}")
