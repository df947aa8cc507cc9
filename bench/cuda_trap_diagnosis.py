"""Which kernel traps in an op sweep case on CUDA (issue 39): `python bench/cuda_trap_diagnosis.py x OP DTYPE` on a GPU
host (default: max_pool2d_with_indices_backward float16).
CUDA_LAUNCH_BLOCKING=1; phases over every sample in one process (eager, float64, nudged, compiled in the sweep's
batches of 24); a process that dies is restarted after what it reached; a crashing batch is split per sample."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.getcwd())
CASE = sys.argv[2] if len(sys.argv) > 2 else "max_pool2d_with_indices_backward"
DTYPE = sys.argv[3] if len(sys.argv) > 3 else "float16"

CHILD = r'''
import copy, sys, os, json
sys.path.insert(0, os.getcwd())
import torch
from suites.ops import catalog, internals, sweep
from suites.module_runs import to_fp64
from suites import rounding_noise
name, dtype_name, phase, indices = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
DEV = os.environ.get("DIAG_DEVICE", "cuda")
dtype = getattr(torch, dtype_name)
case = next(c for c in catalog.cases(DEV) if c.name == name and c.dtype == dtype)
samples = catalog.samples(case, DEV)
if phase == "count":
    print("COUNT", len(samples)); sys.exit(0)
def desc(v):
    if isinstance(v, torch.Tensor):
        d = {"dtype": str(v.dtype), "shape": list(v.shape), "stride": list(v.stride())}
        if v.numel() and not v.is_floating_point():
            d["min"], d["max"] = int(v.min()), int(v.max())
        elif v.numel():
            d["nan"] = int(v.isnan().sum()); d["inf"] = int(v.isinf().sum())
        return d
    return repr(v)[:200]
fn = case.op.op
run = lambda v: fn(v[0], *v[1], **v[2])
sync = lambda: DEV == "cuda" and torch.cuda.synchronize()
orig = lambda i: (samples[i].input, tuple(samples[i].args), dict(samples[i].kwargs))
def show(i):
    s = samples[i]
    return json.dumps({"input": desc(s.input), "args": [desc(a) for a in s.args],
                       "kwargs": {k: desc(v) for k, v in s.kwargs.items()}})
todo = indices if indices else list(range(len(samples)))
if phase == "compiled":
    batches = [todo[k:k + 24] for k in range(0, len(todo), 24)]
    for batch in batches:
        print("AT", json.dumps(batch), flush=True)
        if len(batch) == 1: print("SAMPLE", batch[0], show(batch[0]), flush=True)
        internals.reset_dynamo()
        every = lambda b: [run(x) for x in b]
        try:
            torch.compile(every, backend="inductor")([copy.deepcopy(orig(i)) for i in batch]); sync()
        except Exception as exc:
            print("RAISED", json.dumps(batch), type(exc).__name__, str(exc)[:300].replace("\n", " "), flush=True)
            if "CUDA" in str(exc): raise
    print("ALL OK", flush=True); sys.exit(0)
for i in todo:
    print("AT", json.dumps([i]), flush=True)
    try:
        if phase == "eager":
            run(copy.deepcopy(orig(i)))
        elif phase == "float64":
            run(to_fp64(copy.deepcopy(orig(i))))
        elif phase == "nudged":
            for seed in range(3):
                n = rounding_noise.nudge(copy.deepcopy(orig(i)), seed); run(n); sync(); run(to_fp64(n))
        sync()
    except Exception as exc:
        print("RAISED", json.dumps([i]), type(exc).__name__, str(exc)[:200].replace("\n", " "), flush=True)
        if "CUDA" in str(exc): print("SAMPLE", i, show(i)); raise
print("ALL OK", flush=True)
'''

env = {**os.environ, "CUDA_LAUNCH_BLOCKING": "1", "PYTHONPATH": os.getcwd()}


def child(phase, indices, timeout=540):
    done = subprocess.run([sys.executable, "-c", CHILD, CASE, DTYPE, phase, json.dumps(indices)], env=env,
                          capture_output=True, text=True, timeout=timeout)
    return done


count = int(child("count", []).stdout.split("COUNT")[-1])
print(f"{CASE} {DTYPE}: {count} samples", flush=True)
for phase in ("eager", "float64", "nudged", "compiled"):
    left, crashes = list(range(count)), 0
    while left and crashes < 4:
        try:
            done = child(phase, left, timeout=1300 if phase == "compiled" else 540)
        except subprocess.TimeoutExpired:
            print(f"{phase}: timed out", flush=True)
            break
        ats = [json.loads(line[3:]) for line in done.stdout.splitlines() if line.startswith("AT ")]
        raised = [line for line in done.stdout.splitlines() if line.startswith("RAISED")]
        if "ALL OK" in done.stdout:
            print(f"{phase}: ok ({len(left)} samples, {len(raised)} raised (no CUDA error))", flush=True)
            break
        crashes += 1
        where = ats[-1] if ats else "?"
        print(f"{phase}: CRASH rc {done.returncode} at samples {where}", flush=True)
        for line in done.stdout.splitlines():
            if line.startswith(("SAMPLE", "RAISED")):
                print("   ", line[:1500])
        asserts = [line for line in done.stderr.splitlines() if "Assertion" in line]
        print("    asserts:", len(asserts), "\n     " + "\n     ".join(sorted(set(a[-400:] for a in asserts))[:6]))
        print("    stderr tail:", done.stderr[-1200:], flush=True)
        if phase == "compiled" and isinstance(where, list) and len(where) > 1:
            for i in where:  # the crashing batch, one sample per process
                one = child("compiled", [i], timeout=300)
                ok = "ALL OK" in one.stdout
                print(f"      sample {i}: {'ok' if ok else f'CRASH rc {one.returncode}'}", flush=True)
                if not ok:
                    a = [line for line in one.stderr.splitlines() if "Assertion" in line]
                    print("       ", (a[0][-400:] if a else one.stderr[-600:]))
                    print("       ", [line[:1500] for line in one.stdout.splitlines() if line.startswith("SAMPLE")])
        last = where[-1] if isinstance(where, list) else count
        left = [i for i in left if i > last]
