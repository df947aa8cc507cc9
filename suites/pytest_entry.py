"""How a job starts pytest: `python -m suites.pytest_entry ARGS...` is `python -m pytest ARGS...` with the compiler
surface's baseline (suites/compiler_surface.py) taken first.

pytest imports plugins before any hook of ours can run: the `-p` options of the repository's `addopts` (put before
the command line's own, so before `-p suites.plugin`) and the `pytest11` entry points of every installed
distribution (the repository's editable install, its dependencies). A patch of inductor made there would be taken
for torch's own. Here nothing of the repository has run yet but what the interpreter itself runs at its start
(`.pth` files, `sitecustomize`).
"""

from __future__ import annotations

import os
import sys


def main() -> int:
    out = os.environ.get("COMPILE_CI_OUTPUT_DIR")
    if out:  # in a job (suites/plugin.py's OUTPUT_ENV)
        from suites import compiler_surface

        compiler_surface.install()
    import pytest

    code = pytest.console_main()
    if out:
        write_surface(out)
    return code


def write_surface(out: str) -> None:
    """`surface.json`: the compiler fingerprint this job measured, which the service compares with the one recorded
    with any results it reuses for this job (service/planning/reuse_check.py). A stand-in until the job writes the
    full surface (issue 38): the fingerprint and the changed table entries."""
    import json

    from suites import compiler_surface

    try:
        changes = [{"place": str(key), "kind": table, "where": line} for table, key, line in
                   compiler_surface.changed_entries()]
        changes += [{"place": key, "kind": "override", "where": line} for key, line in
                    compiler_surface.changed_overrides()]
        data = {"fingerprint": compiler_surface.fingerprint(), "changes": changes}
    except Exception as exc:  # noqa: BLE001 - unknown: the service then reuses nothing for this job
        print(f"compile-ci: the compiler surface could not be written ({exc!r})", file=sys.stderr)
        return
    with open(os.path.join(out, "surface.json"), "w") as handle:
        json.dump(data, handle)


if __name__ == "__main__":
    sys.exit(main())
