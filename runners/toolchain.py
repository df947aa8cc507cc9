"""The linker a job's C++ builds use. The one owner of COMPILER_PATH.

On CPU, inductor builds every kernel into its own shared object with one `g++ ... -shared -ltorch -ltorch_cpu
-ltorch_python` run, and GNU ld (bfd) spends about 0.3 s of each run resolving libtorch's symbols: a third of the
kernel's build. LLVM's lld links the same object in about 0.06 s. g++ takes its `ld` from the directories in
COMPILER_PATH before its own (GCC's documented search order), so pointing COMPILER_PATH at a directory that holds
only `ld -> ld.lld` changes the linker and nothing else: no compiler flag, no inductor setting, so no cache key
and no generated code moves. The runner images do the same (`ENV COMPILER_PATH` in their Dockerfiles).

COMPILE_CI_LINKER=system (in the worker's environment) keeps g++'s default linker (GNU ld), for both runners.
"""

from __future__ import annotations

import os
from pathlib import Path

LINKER_DIR = Path(__file__).resolve().with_name("linker")  # holds one entry: ld -> /usr/bin/ld.lld
CHOICES = ("lld", "system")


def linker_env(*, in_image: bool, choice: str | None = None) -> dict[str, str]:
    """What a job's environment gets for its linker. `in_image`: a runner image's job, whose image already sets
    COMPILER_PATH to its lld; a LocalRunner job gets this checkout's `linker/` when the host has lld."""
    choice = choice or os.environ.get("COMPILE_CI_LINKER", "lld")
    if choice not in CHOICES:
        raise ValueError(f"COMPILE_CI_LINKER must be one of {', '.join(CHOICES)}, got {choice!r}")
    if choice == "system":
        return {"COMPILER_PATH": ""}  # empty: g++ searches only its own directories, where GNU ld is
    if in_image or not (LINKER_DIR / "ld").exists():  # exists() follows the link: false when lld is missing
        return {}
    return {"COMPILER_PATH": str(LINKER_DIR)}
