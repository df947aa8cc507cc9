"""Build inductor's precompiled C++ header once, where no job can write, for every later job of the same build.

Before its first CPU kernel, every process that runs inductor precompiles `cpp_prefix.h` (preprocess, hash,
g++ to a ~150 MB `.gch`) into `$TMPDIR/torchinductor_<user>/precompiled_headers/`, unless the file is already there:
about 6 s on a quiet 2-core host, paid by every job whose cache does not hold it yet (a repository's first jobs,
and every pull-request job before the default branch's first push wrote its trusted cache). The file's name is a
hash of the header's preprocessed text, the compiler's version and its command line (the ISA's flags included,
not the directory), so a header built here under a job's environment is the one a job would build, and a job whose
flags differ (another CPU, another ISA pin) simply builds its own.

`python -m suites.header_seed OUT` compiles one small function on the CPU with stock inductor, in a throwaway
cache, and copies the header files it built to `OUT/precompiled_headers/`. A runner image runs it at its build
(the worker takes the files from the image); the LocalRunner's worker runs it once with a job's environment. The
worker then lays them under a job's cache (runners/header_seed.py). Prints what it wrote as JSON.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

HEADER_DIR = "precompiled_headers"
# What inductor names its header files: a base32 hash, then .h (the include) or .h.gch (the precompiled one).
NAME = re.compile(r"[a-z0-9]{20,64}\.h(\.gch)?")


def build(out: Path) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="compile-ci-header-seed-") as scratch:
        # Before torch is imported: inductor fixes its header directory from TMPDIR at import.
        os.environ["TMPDIR"] = scratch
        tempfile.tempdir = None
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(scratch, "inductor")
        import torch

        compiled = torch.compile(lambda x: (x * 2.0).sin() + 1.0, backend="inductor")
        compiled(torch.randn(8))
        built = [p for p in Path(scratch).glob(f"torchinductor_*/{HEADER_DIR}/*") if NAME.fullmatch(p.name)]
        target = out / HEADER_DIR
        target.mkdir(parents=True, exist_ok=True)
        for path in built:
            shutil.copyfile(path, target / path.name)
        return sorted(p.name for p in built)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m suites.header_seed OUT", file=sys.stderr)
        return 2
    print(json.dumps({"headers": build(Path(argv[0]))}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
