"""How a job starts pytest: `python -m suites.pytest_entry ARGS...` is `python -m pytest ARGS...` with the compiler
surface's snapshot of torch as torch defines it (suites/compiler_surface.py) taken first.

pytest imports plugins before any hook of ours can run: the `-p` options of the repository's `addopts` (put before
the command line's own, so before `-p suites.plugin`) and the `pytest11` entry points of every installed
distribution (the repository's editable install, its dependencies). A patch of torch's compiler made there would be
taken for torch's own. Here nothing of the repository has run yet but what the interpreter itself runs at its start
(`.pth` files, `sitecustomize`); torch's modules imported later are taken by the surface's import hook.
"""

from __future__ import annotations

import os
import sys


def main() -> int:
    if os.environ.get("COMPILE_CI_OUTPUT_DIR"):  # in a job (suites/plugin.py's OUTPUT_ENV)
        from suites import compiler_surface

        compiler_surface.install()
    import pytest

    return pytest.console_main()


if __name__ == "__main__":
    sys.exit(main())
