"""Whether jobs may skip inductor's vector-ISA probe: every x86 ISA inductor knows builds and loads here.

Before it generates its first CPU kernel, every process that runs inductor asks which vector ISAs it may use
(torch/_inductor/cpu_vec_isa.py): for each ISA the CPU declares, it builds a test program that includes ATen's
vector headers with that ISA's flags, then dlopens it in a child interpreter. Measured on a 2-core runner, picking
the ISA takes 8.6 s with a cold compile cache (three such builds) and 1.7 s with a warm one (three child
interpreters), in every suite job. The answer depends on the C++ toolchain and torch's headers, both fixed in a
runner image, and on the CPU's flags, which inductor checks anyway. With TORCHINDUCTOR_VEC_ISA_OK=1 the same pick
takes 1.65 s cold and 0.3 s warm: inductor still builds its small intrinsic checks (AVX512-BF16, VNNI, AMX), which
add compiler flags, so those stay per job and exact. So the check runs once per toolchain instead:
when the runner image is built (its Dockerfile runs this script and fails the build if it fails), and once per
interpreter for the LocalRunner (runners/toolchain.py). Exit 0 means every ISA built and loaded, so
`TORCHINDUCTOR_VEC_ISA_OK=1` (use the ISAs the CPU declares) picks exactly what the probe would have picked.

`--this-cpu` (the LocalRunner, whose jobs run on the host that checks) checks only the ISAs this CPU declares: the
others never reach a job's list. A runner image checks all of them, since it may run on another CPU. The builds
run side by side, one thread each.

Standalone: it imports only torch, because it runs inside a runner image as well as on the worker's host.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor


def main() -> int:
    if platform.machine() not in ("x86_64", "AMD64"):
        print(json.dumps({"ok": False, "why": f"checked only on x86_64, this is {platform.machine()}"}))
        return 3
    with tempfile.TemporaryDirectory(prefix="compile-ci-isa-check-") as cache:
        # Before torch is imported: inductor reads both at import. The builds go to a throwaway cache.
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
        os.environ.pop("TORCHINDUCTOR_VEC_ISA_OK", None)
        from torch._inductor import cpu_vec_isa

        x86 = [isa for isa in cpu_vec_isa.supported_vec_isa_list if str(isa).startswith("avx")]  # AVX2 .. AMX
        if "--this-cpu" in sys.argv[1:]:
            declared = cpu_vec_isa.x86_isa_checker()
            x86 = [isa for isa in x86 if all(flag in declared for flag in str(isa).split())]
        # check_build: the same build and dlopen the probe does, whether or not this CPU has the ISA (loading
        # a library runs none of its vector code, so a build host without AMX still checks AMX's build).
        with ThreadPoolExecutor(max(1, len(x86))) as pool:
            built = pool.map(lambda isa: bool(isa.check_build(cpu_vec_isa.VecISA._avx_code)), x86)
            results = dict(zip((type(isa).__name__ for isa in x86), built, strict=True))
    ok = bool(results) and all(results.values())
    print(json.dumps({"ok": ok, "isas": results}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
