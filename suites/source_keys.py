"""Inductor's source keys (`torch_key`, `triton_key`), computed once where the job cannot write, read by every job.

Inductor keys its FX-graph, AOT-autograd and kernel caches with `torch_key()`: a sha256 over the bytes of every
source file of torch (about 3,000 modules), computed once per process, so every job pays it before its first
compile (0.15-0.45 s on this repository's 2-core host, more on a slow disk); on CUDA `triton_key()` hashes
Triton's sources and its shared library too. Both depend only on the installed torch and Triton, which a runner
image holds in its read-only root. So the image's build computes them (`python -m suites.source_keys --write
PATH`, the Dockerfiles) and the LocalRunner's worker once per interpreter (`python -m suites.source_keys`,
runners/toolchain.py), and a job's entry (suites/pytest_entry.py) hands them to inductor through the setter
inductor itself uses for its compile workers (`torch_key.set`), before inductor first asks.

Exact, not a guess: the values are torch's own functions' results; a job uses them only when the torch it imported
is the one they were computed for (version and directory), else torch computes its own. Trust: the image's file is
written by the image build into a root-owned, read-only path; the LocalRunner's value travels in the job's
environment, which only the worker sets. A job may set its own process's keys to anything (it runs arbitrary
code), as it could patch inductor; what it compiles under a wrong key lands only in its own throwaway cache layer
(runners/compile_cache.py), unless it is a push of the default branch, which is trusted to write the cache anyway.

Standalone: imports only torch (and Triton when present), since it runs in a runner image's build as well.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import types
from typing import Any

IMAGE_FILE = "/opt/compile-ci/source_keys.json"  # written by the runner images' build, read-only to jobs
ENV = "COMPILE_CI_SOURCE_KEYS"  # the LocalRunner's: the same JSON, set by the worker


def compute() -> dict[str, Any]:
    """The keys as torch computes them, and which torch they belong to."""
    import torch
    from torch._inductor import codecache

    triton = codecache.triton_key() if hasattr(codecache, "triton_key") else None
    return {"torch_version": torch.__version__, "torch_dir": os.path.dirname(os.path.realpath(torch.__file__)),
            "torch_key": base64.b64encode(codecache.torch_key()).decode(), "triton_key": triton}


def load() -> dict[str, Any] | None:
    """What the trusted side computed for this job: the worker's environment first, then the image's file."""
    text = os.environ.get(ENV, "")
    if not text:
        try:
            with open(IMAGE_FILE) as handle:
                text = handle.read(64 * 1024)
        except OSError:
            return None
    try:
        keys = json.loads(text)
    except ValueError:
        return None
    return keys if isinstance(keys, dict) else None


def apply(keys: dict[str, Any], codecache: types.ModuleType) -> bool:
    """Seed inductor's caches of the keys when they belong to the torch this process imported; True if seeded."""
    import torch

    if (keys.get("torch_version") != torch.__version__
            or keys.get("torch_dir") != os.path.dirname(os.path.realpath(torch.__file__))
            or not isinstance(keys.get("torch_key"), str)):
        return False
    try:
        torch_key = base64.b64decode(keys["torch_key"], validate=True)
        codecache.torch_key.set(torch_key)
        if "triton_key" in keys and isinstance(keys["triton_key"], str | None):
            codecache.triton_key.set(keys["triton_key"])
    except (ValueError, RuntimeError, AttributeError):
        return False  # a bad value, a torch without the setter, or already computed: torch's own stands
    return True


def main() -> int:
    keys = compute()
    if sys.argv[1:2] == ["--write"]:
        with open(sys.argv[2], "w") as handle:
            json.dump(keys, handle)
    else:
        print(json.dumps(keys))
    return 0


if __name__ == "__main__":
    sys.exit(main())
