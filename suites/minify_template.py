"""Minimise a red compile-ci test on a declared model with torch's own minifier (written by suites/explain.py).

    python minify.py [PATH_TO_CLONE]      (default: the current directory; check out the job's commit first)

Needs torch and what the repository's models import. It rebuilds the declared model and its example inputs from
the clone's [targets] entry (a declared fuse function is compiled as it is) and runs the step the test ran (forward,
and backward with the suites' fixed cotangents; in eval mode, under the suite's inductor settings, with channels-last
inputs where the test ran so) under torch.compile with torch's repro settings, one attempt per process:
- a mismatch: TORCHDYNAMO_REPRO_AFTER=aot, level 4 (every graph AOT autograd hands to inductor against its eager run,
  with an fp64 reference and torch's own tolerance: catches lowering, fusion and code generation bugs), then
  TORCHDYNAMO_REPRO_AFTER=dynamo, level 4 (the whole backend, forward and backward, against eager: also catches a
  wrong decomposition, which after AOT is already in the graph both sides run);
- a crash: TORCHDYNAMO_REPRO_AFTER=aot, level 2 (the graph whose generated code raised).
The first attempt that finds a failing graph writes minifier_launcher.py, which this script runs: the smallest graph
that still fails ends up in ./minify-out/repro.py, a standalone file.
"""

import glob
import importlib
import os
import subprocess
import sys

SETTINGS = {}

ATTEMPT_ENV = "COMPILE_CI_MINIFY_ATTEMPT"


def run_step(clone, after, level):
    os.environ.update({"TORCHDYNAMO_REPRO_AFTER": after, "TORCHDYNAMO_REPRO_LEVEL": str(level)})
    sys.path[:0] = [p for p in (clone, os.path.join(clone, "src")) if os.path.isdir(p)]
    import torch
    import torch._dynamo.config
    import torch._inductor.config

    # Set again for a torch imported before these variables were (a sitecustomize, say): it reads them at import.
    torch._dynamo.config.repro_after, torch._dynamo.config.repro_level = after, level
    module_name, attribute = SETTINGS["spec"].split(":")
    torch.manual_seed(0)  # as the suites do before calling the [targets] callable
    entries = {name: (factory, inputs) for name, factory, inputs in getattr(importlib.import_module(module_name),
                                                                             attribute)()}
    factory, inputs = entries[SETTINGS["name"]]
    device = SETTINGS["device"]
    model = factory if SETTINGS["call"] == "function" else factory().to(device)
    if SETTINGS["eval"]:
        model.eval()
    inputs = [t.to(device) if isinstance(t, torch.Tensor) else t for t in inputs]
    if SETTINGS["channels_last"]:
        inputs = [t.to(memory_format=torch.channels_last) if isinstance(t, torch.Tensor) and t.dim() == 4 else t
                  for t in inputs]
    torch._inductor.config.fallback_random = True  # dropout masks as eager's, as in the suites
    for name, value in SETTINGS["inductor_config"].items():  # the suite's own settings, e.g. layout optimization
        setattr(torch._inductor.config, name, value)
    compiled = torch.compile(model, backend="inductor")
    torch.manual_seed(0)
    with torch.set_grad_enabled(SETTINGS["backward"]):
        outputs = compiled(*inputs)
    leaves = [t for t in torch.utils._pytree.tree_leaves(outputs) if isinstance(t, torch.Tensor) and t.requires_grad]
    if SETTINGS["backward"] and leaves:
        generator = torch.Generator().manual_seed(1234)
        cotangents = [torch.randn(t.shape, generator=generator, dtype=torch.float64).to(t.dtype).to(t.device)
                      for t in leaves]
        torch.autograd.backward(leaves, cotangents)


def main():
    clone = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
    out = os.path.abspath("minify-out")
    if ATTEMPT_ENV in os.environ:  # a child: one attempt, in the debug directory it was given
        after, level = os.environ[ATTEMPT_ENV].split(":")
        try:
            run_step(clone, after, int(level))
        except Exception as exc:  # noqa: BLE001 - torch's AccuracyError, or the crash itself
            print(f"{SETTINGS['nodeid']} ({after}, level {level}): {type(exc).__name__}: {exc}")
        return 0
    for after, level in SETTINGS["attempts"]:
        debug = os.path.join(out, f"after_{after}")
        os.makedirs(debug, exist_ok=True)
        print(f"attempt: TORCHDYNAMO_REPRO_AFTER={after} TORCHDYNAMO_REPRO_LEVEL={level}", flush=True)
        env = {**os.environ, ATTEMPT_ENV: f"{after}:{level}", "TORCH_COMPILE_DEBUG_DIR": debug}
        subprocess.run([sys.executable, os.path.abspath(__file__), clone], env=env, cwd=debug, check=False)
        launchers = sorted(glob.glob(os.path.join(debug, "**", "minifier_launcher.py"), recursive=True),
                           key=os.path.getmtime)
        if launchers:
            print(f"minifying {launchers[-1]} (this compiles the graph many times)", flush=True)
            subprocess.run([sys.executable, launchers[-1], "minify"], cwd=debug, check=False)
            result = os.path.join(debug, "repro.py")
            print(f"minimised repro: {result}" if os.path.exists(result) else "the minifier wrote no repro.py")
            return 0 if os.path.exists(result) else 1
    print(f"torch's {SETTINGS['what']} checks found no failing graph at their own tolerance (or failed themselves, "
          "see above); the job's output_code_*.py files are the graphs the test compiled")
    return 1


if __name__ == "__main__":
    sys.exit(main())
