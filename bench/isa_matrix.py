"""The numerics corpus at every x86-64 CPU level this host can run, and on CUDA (issue 27), with counts per row.

    python bench/isa_matrix.py [--tests correctness/test_correctness_numerics.py] [--targets REPO] [--out DIR]

Rows: `native` (nothing pinned: what a job on this host runs), then each level of tests/suites/cpu_levels.py (avx2,
avx512, avx512_bf16, amx: inductor's vector ISA, eager's kernels, oneDNN and oneMKL pinned together), each run
through the LocalRunner with a cold compile cache of its own; a level the host lacks is a row saying why; then `cuda`
when torch sees a GPU. Each CPU row also says which bf16 kernels flush subnormal results at that level (the probe
below), so a red row can be read against the hardware. Needs only torch and pytest besides this repository, so it
runs on a GPU host. Prints a table and a JSON line; exits 1 when any row has a failure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.suites import run_suite, targets_env  # noqa: E402
from tests.suites.cpu_levels import LEVEL_ENV, LEVELS, host_lacks  # noqa: E402


def probe() -> dict[str, str]:
    """For bf16 inputs of 1/8 of bf16's smallest normal: does each kernel keep the subnormal results or flush them?
    Which library each op reaches (on torch 2.13, seen with MKL_VERBOSE / ONEDNN_VERBOSE): a 5x8x5 bmm runs ATen's
    own loops, a 32x32 mm and GELU run oneDNN, the CPU flash-attention kernel (what inductor rewrites attention to)
    calls oneMKL's bf16 GEMM."""
    import torch
    import torch.nn.functional as F

    bf16 = torch.bfloat16
    sub = torch.full((32, 32), torch.finfo(bf16).tiny / 8, dtype=bf16)
    eye = torch.eye(32, dtype=bf16)
    torch.manual_seed(0)
    q = torch.randn(1, 1, 5, 8).to(bf16)
    attention = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, q, sub[:5, :8].reshape(1, 1, 5, 8))[0]
    results = {
        "bmm 5x8x5": torch.bmm(sub[None, :5, :8], eye[None, :8, :5]),
        "mm 32x32": sub @ eye,
        "gelu": F.gelu(sub),
        "flash attention": attention,
    }
    return {name: "keeps" if bool((out != 0).all()) else "flushes" for name, out in results.items()}


def run_probe(env: dict[str, str]) -> dict[str, str] | str:
    proc = subprocess.run([sys.executable, __file__, "--probe"], env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=300)
    return json.loads(proc.stdout.splitlines()[-1]) if proc.returncode == 0 else f"probe failed: {proc.stderr[-300:]}"


def pinned_line(log: Path) -> str:
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    return next((line for line in lines if line.startswith("cpu level ")), "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", default="correctness/test_correctness_numerics.py",
                        help="what to run, relative to suites/ (default: the whole numerics module)")
    parser.add_argument("--targets", type=Path, default=None, help="a repository whose [targets] are run too")
    parser.add_argument("--out", type=Path, default=None, help="keep artifacts here (default: a temp dir)")
    args = parser.parse_args()
    base = args.out.resolve() if args.out else Path(tempfile.mkdtemp(prefix="compile-ci-bench-isa-"))
    extra = targets_env(args.targets)
    rows: list[dict[str, object]] = []

    def run(name: str, device: str, env: dict[str, str]) -> None:
        result = run_suite(args.tests, device, base / "cache" / name, base / name, {**extra, **env})
        row = {"row": name, "device": device, **result, "pinned": pinned_line(base / name / "log.txt")}
        if device == "cpu":
            row["bf16_subnormals"] = run_probe(env)
        rows.append(row)
        print(f"{name:<12} {result['wall_s']:>6.1f} s  passed {result['passed']:>3}  failed {result['failed']:>2}  "
              f"skipped {result['skipped']:>3}  {row['pinned']}", flush=True)
        if device == "cpu":
            print(f"{'':<12} bf16 subnormal results: {row['bf16_subnormals']}", flush=True)
        for failure in result["failures"]:  # type: ignore[attr-defined]
            print(f"{'':<12} FAILED {failure}", flush=True)

    run("native", "cpu", {})
    for level in LEVELS:
        lacking = host_lacks(level)
        if lacking:
            rows.append({"row": level.name, "device": "cpu", "skipped_because": lacking})
            print(f"{level.name:<12} not run: {lacking}", flush=True)
            continue
        run(level.name, "cpu", {**level.env, LEVEL_ENV: level.name, "PYTEST_PLUGINS": "tests.suites.cpu_levels"})
    import torch

    if torch.cuda.is_available():
        run("cuda", "cuda", {})
    else:
        rows.append({"row": "cuda", "device": "cuda", "skipped_because": "torch.cuda.is_available() is False"})
        print(f"{'cuda':<12} not run: torch.cuda.is_available() is False", flush=True)
    print(json.dumps({"torch": torch.__version__, "tests": args.tests, "rows": rows}))
    return 1 if any(row.get("failed") for row in rows) else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--probe"]:
        print(json.dumps(probe()))
        sys.exit(0)
    sys.exit(main())
