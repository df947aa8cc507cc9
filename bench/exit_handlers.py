"""Where a process's exit goes: each atexit handler timed, after a compile that starts inductor's compile workers.

Every `atexit.register` made after this module starts is wrapped to print its handler's name and seconds when the
handlers run (as a job's `suites/pytest_entry.py` runs them: `threading._shutdown()`, then the handlers, then
`os._exit`). On a GPU host: `python -m bench.exit_handlers` (cuda; `--imports` also times importing torchvision, timm
and transformers' GPT-2 classes, what the real-model sample's shards import); `TORCHINDUCTOR_COMPILE_THREADS=1` for
the same without inductor's compile-worker pool. Found with it (H200, torch 2.11, three runs):
`torch._inductor.async_compile.shutdown_compile_workers` 1.27 s and 5.03 s with the pool, every other handler under
0.01 s (docs/benchmarks.md, "a job's fixed cost").
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

_register = atexit.register


def _timed_register(handler: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[..., Any]:
    name = f"{getattr(handler, '__module__', '?')}.{getattr(handler, '__qualname__', repr(handler))}"

    def timed(*a: Any, **k: Any) -> Any:
        started = time.time()
        try:
            return handler(*a, **k)
        finally:
            print(f"  atexit {name} {time.time() - started:.3f}", flush=True)

    _register(timed, *args, **kwargs)
    return handler


def main() -> int:
    atexit.register = _timed_register  # type: ignore[assignment]
    started = time.time()
    import torch
    from torch._inductor import config

    print(f"import torch {time.time() - started:.3f}; compile_threads {config.compile_threads}")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = torch.nn.Sequential(torch.nn.Linear(12, 20), torch.nn.LayerNorm(20), torch.nn.GELU(),
                                torch.nn.Linear(20, 6)).to(device)
    x = torch.randn(5, 12, device=device, requires_grad=True)
    started = time.time()
    torch.compile(model)(x).sum().backward()
    print(f"first compile on {device} {time.time() - started:.3f}")
    if "--imports" in sys.argv:
        for module in ("torchvision", "timm", "transformers"):
            started = time.time()
            __import__(module)
            print(f"import {module} {time.time() - started:.3f}")
        started = time.time()
        from transformers import GPT2Config, GPT2LMHeadModel  # noqa: F401
        print(f"transformers GPT-2 classes {time.time() - started:.3f}")
    started = time.time()
    threading._shutdown()  # type: ignore[attr-defined]
    print(f"threading._shutdown {time.time() - started:.3f}")
    started = time.time()
    atexit._run_exitfuncs()
    print(f"atexit total {time.time() - started:.3f}", flush=True)
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main())
