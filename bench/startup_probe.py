"""A job's fixed cost, step by step, in one process: run inside a runner image or with a LocalRunner's interpreter by
bench/job_startup.py, which prints what it writes (JSON on stdout). Standalone: torch and the suites only.

Each step is timed on its own, in the order a job meets them: the interpreter's start (measured by the caller),
`import torch`, dynamo and inductor, inductor's source keys (seeded from the image or the worker as jobs do, or
computed when --compute-keys), the CPU ISA pick, pytest and the suites' plugin, the first compile of a small model
(its g++ runs and inductor's precompiled-header step counted apart), a second compile, and what the process's
finalization costs (the caller times the exit).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

T0 = float(os.environ.get("PROBE_T0", "0")) or time.time()
steps: dict[str, float] = {}
_last = [time.time()]


def step(name: str) -> None:
    now = time.time()
    steps[name] = round(now - _last[0], 3)
    _last[0] = now


def main() -> int:
    steps["interpreter start"] = round(time.time() - T0, 3)
    _last[0] = time.time()
    device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    import torch

    step("import torch")
    import torch._dynamo

    step("import torch._dynamo")
    from torch._inductor import codecache, compile_fx  # noqa: F401
    from torch._inductor import config as inductor_config

    step("import inductor")
    seeded = False
    if "--compute-keys" not in sys.argv:
        try:
            from suites import source_keys
        except ImportError:  # an image from before the keys were precomputed
            pass
        else:
            keys = source_keys.load()
            seeded = keys is not None and source_keys.apply(keys, codecache)
    _last[0] = time.time()
    codecache.torch_key()
    if hasattr(codecache, "triton_key"):  # torch 2.13; torch 2.11 has none there
        codecache.triton_key()
    step("torch_key + triton_key")
    if device == "cpu":
        from torch._inductor import cpu_vec_isa

        cpu_vec_isa.pick_vec_isa()
        step("CPU ISA pick")
    else:
        torch.cuda.init()
        torch.empty(1, device="cuda")
        step("CUDA context")
    import pytest  # noqa: F401

    import suites.plugin  # noqa: F401

    step("import pytest + suites.plugin")
    spent = {"g++ runs": 0, "g++ s": 0.0, "other subprocesses": 0, "other subprocess s": 0.0,
             "precompiled header s": 0.0}
    real_run = subprocess.run

    def timed_run(*args: object, **kwargs: object) -> object:
        started = time.time()
        try:
            return real_run(*args, **kwargs)  # type: ignore[call-overload]
        finally:
            argv = args[0] if args else kwargs.get("args")
            name = os.path.basename(str(argv[0] if isinstance(argv, list | tuple) else argv).split()[0])
            kind = "g++" if name in ("g++", "gcc", "c++", "cc", "clang++") else "other subprocess"
            spent[f"{kind} runs" if kind == "g++" else "other subprocesses"] += 1
            spent[f"{kind} s"] += time.time() - started

    subprocess.run = timed_run  # type: ignore[assignment]
    header = getattr(codecache, "_precompile_header", None)
    if header is not None and hasattr(header, "__wrapped__"):
        inner = header

        def timed_header(*args: object, **kwargs: object) -> object:
            started = time.time()
            try:
                return inner(*args, **kwargs)
            finally:
                spent["precompiled header s"] += time.time() - started

        codecache._precompile_header = timed_header
    model = torch.nn.Sequential(torch.nn.Linear(12, 20), torch.nn.LayerNorm(20), torch.nn.GELU(),
                                torch.nn.Linear(20, 6)).to(device)
    x = torch.randn(5, 12, device=device, requires_grad=True)
    _last[0] = time.time()
    torch.compile(model)(x).sum().backward()
    step("first compile (forward and backward)")
    torch.compile(lambda a: (a.sin() * 3).relu().mean(0))(x.detach())
    step("second compile")
    result = {"steps": steps, "first compile's parts": {k: round(v, 3) for k, v in spent.items()},
              "torch": torch.__version__, "device": device, "source keys seeded": seeded,
              "compile_threads": inductor_config.compile_threads}
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    code = main()
    print(json.dumps({"exit_started_at": round(time.time() - T0, 3)}), flush=True)
    sys.exit(code)
