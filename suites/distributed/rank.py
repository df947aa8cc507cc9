"""One rank of a distributed-suite run (``python -m suites.distributed.rank REQUEST RANK``), started by ``launch.py``.

Joins the process group through the test's TCP store on loopback, then for each wrapper of the request trains a
fresh copy of the model eagerly and compiled under that wrapper and saves, per wrapper, ``rank<R>-<wrapper>.pt``:
both runs' gradients and parameters, the compiled run's counters (graphs, graph breaks, recompiles, graphs handed
to inductor) with their reasons, and inductor's generated code. The test process judges the files; a rank only
reports. After a wrapper fails, a rank exits at once: its peer may be waiting in a collective that will never come.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.nn.parallel import DistributedDataParallel

from suites import harness, harness_distributed, targets
from suites.capture import CompileCapture
from suites.distributed.corpus import BUCKET_CAP_MB, CORPUS
from suites.distributed.steps import WORLD_SIZE, train

MAX_CODES = 40  # generated-code files kept per wrapper and rank (a model can compile many graphs)
MAX_CODE_BYTES = 1 << 20


def load_model(source: str, name: str) -> tuple[Any, tuple[Any, ...], tuple[str, ...]]:
    """(factory, example inputs, FSDP2 units besides the root) of a corpus model or a declared one."""
    if source == "corpus":
        model = CORPUS[name]
        torch.manual_seed(0)
        return model.factory, model.make_inputs(), model.fsdp_units
    for entry in targets.declared_models():
        if isinstance(entry, targets.DeclaredModel) and entry.name == name:
            return entry.factory, entry.example_inputs, ()
    raise LookupError(f"no declared model named {name!r} in {targets.TARGETS_ENV}")


def build(factory: Any, device: str) -> nn.Module:
    torch.manual_seed(0)  # the same initial weights on every rank and in the single-process run
    return factory().to(device)


def wrap(module: nn.Module, wrapper: str, device: str, units: tuple[str, ...]) -> nn.Module:
    if wrapper in ("ddp", "ddp_optimizer"):
        ids = [torch.device(device).index] if device.startswith("cuda") else None
        return DistributedDataParallel(module, device_ids=ids, bucket_cap_mb=BUCKET_CAP_MB)
    shard = harness_distributed.fully_shard()
    mesh = init_device_mesh(torch.device(device).type, (WORLD_SIZE,))
    for unit in units:  # inner units first: each gathers its own weights just before it runs
        shard(module.get_submodule(unit), mesh=mesh)
    shard(module, mesh=mesh)
    return module


def compiled_run(factory: Any, inputs: tuple[Any, ...], wrapper: str, device: str, units: tuple[str, ...],
                 rank: int) -> dict[str, Any]:
    root = os.path.abspath(os.environ.get(targets.CHECKOUT_ENV) or ".")
    capture = CompileCapture(root)
    counter = harness_distributed.compiled_graph_counter()
    ddp_mode = (harness_distributed.optimize_ddp(wrapper == "ddp_optimizer") if wrapper != "fsdp2"
                else contextlib.nullcontext())
    with harness.fresh_compile_state(), harness.inductor_config(fallback_random=True), ddp_mode:
        module = build(factory, device)
        compiled = torch.compile(wrap(module, wrapper, device, units), backend=counter)
        with capture.active():
            record = train(compiled, module, inputs, [rank])
    codes, size = [], 0
    for code in capture.codes[:MAX_CODES]:
        size += len(code)
        if size > MAX_CODE_BYTES:
            break
        codes.append(code)
    counters = {key: int(capture.metrics.get(key, 0)) for key in ("graphs", "graph_breaks", "recompiles")}
    counters["backend_graphs"] = int(counter.frame_count)
    return {**record, "counters": counters, "graph_break_reasons": capture.graph_break_reasons,
            "recompile_reasons": capture.recompile_reasons, "codes": codes}


def run_wrapper(source: str, name: str, wrapper: str, device: str, rank: int) -> dict[str, Any]:
    try:
        factory, example_inputs, units = load_model(source, name)
        inputs = tuple(x.to(device) if isinstance(x, torch.Tensor) else x for x in example_inputs)
        module = build(factory, device)
        start = time.monotonic()
        eager = train(wrap(module, wrapper, device, units), module, inputs, [rank])
        eager_s, start = time.monotonic() - start, time.monotonic()
        compiled = compiled_run(factory, inputs, wrapper, device, units, rank)
        compiled["counters"]["seconds"] = round(time.monotonic() - start, 2)  # compiling included
        eager["seconds"] = round(eager_s, 2)
    except pytest.skip.Exception as exc:
        return {"status": "skipped", "message": str(exc.msg)}
    except Exception as exc:  # noqa: BLE001 - whatever the model or torch raised is this rank's report
        frames = traceback.extract_tb(exc.__traceback__)
        where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
        return {"status": "error", "message": f"{type(exc).__name__}: {exc}{where}"[:4000]}
    return {"status": "ran", "eager": eager, "compiled": compiled}


def main(argv: list[str]) -> int:
    request = json.loads(Path(argv[0]).read_text())
    rank = int(argv[1])
    out = Path(request["out_dir"])
    targets.add_checkout_to_sys_path()
    device = request["device"]
    if device == "cuda":
        torch.cuda.set_device(rank)
        device = f"cuda:{rank}"
        # Plain fp32 kernels, as in the single-process reference the test computes (suites/judging.py).
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    store = dist.TCPStore(request["host"], request["port"], is_master=False,
                          timeout=timedelta(seconds=request["timeout_s"]))
    dist.init_process_group(request["backend"], store=store, rank=rank, world_size=WORLD_SIZE,
                            timeout=timedelta(seconds=request["timeout_s"]))
    for wrapper in request["wrappers"]:
        result = run_wrapper(request["source"], request["name"], wrapper, device, rank)
        torch.save(result, out / f"rank{rank}-{wrapper}.pt")
        if result["status"] == "error":
            # Leave without tearing the process group down: with NCCL that waits on the collective the peer is
            # stuck in (the launcher kills a peer that outlives this rank by a minute).
            sys.stdout.flush()
            os._exit(1)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
