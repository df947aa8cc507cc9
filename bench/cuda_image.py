"""The CUDA runner image, checked on a host without a GPU: torch imports in it, and a suite runs in it on cpu.

    python bench/cuda_image.py [--suite correctness] [--image compile-ci/runner-cuda:latest]

Build the image first (large: torch from the package index with its CUDA libraries, ~2.6 GB of wheels cached under
~/.cache/compile-ci/wheels/cuda): `compile-ci images build cuda --local-base`. Kept out of CI's default run for its
size. The suite runs through the DockerRunner, the hardened container a cuda job gets (no network, read-only root,
uid 10001, limits), with the image standing in as the cpu image and `COMPILE_CI_DEVICE=cpu`; on a GPU host the same
image gets the worker's GPUs through the NVIDIA container toolkit.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.suites import counts, failures  # noqa: E402
from runners.docker_runner import DockerRunner  # noqa: E402
from runners.protocol import RunSpec  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="correctness")
    parser.add_argument("--image", default="compile-ci/runner-cuda:latest")
    args = parser.parse_args()
    probe = ("import torch, numpy, expecttest, pytest, suites.plugin; "
             "print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), torch.cuda.is_available())")
    facts = subprocess.run(["docker", "run", "--rm", "--network", "none", args.image, "python", "-c", probe],
                           capture_output=True, text=True)
    size = subprocess.run(["docker", "image", "inspect", "--format", "{{.Size}}", args.image],
                          capture_output=True, text=True).stdout.strip()
    print(f"image {args.image}: {int(size or 0) / 2**30:.2f} GiB; torch, CUDA, cuDNN, cuda available: "
          f"{facts.stdout.strip() or facts.stderr.strip()[-500:]}")
    if facts.returncode != 0:
        return 1
    out = Path(tempfile.mkdtemp(prefix="compile-ci-cuda-image-"))
    command = ("python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "suites.plugin",
               "-o", "junit_family=xunit1", f"--junitxml={out / 'junit.xml'}", str(ROOT / "suites" / args.suite))
    spec = RunSpec(job_id=f"cuda-image-{args.suite}", command=command, checkout_dir=ROOT, output_dir=out,
                   timeout_s=1800, device="cpu", suites_dir=ROOT / "suites",
                   env={"COMPILE_CI_DEVICE": "cpu", "COMPILE_CI_OUTPUT_DIR": str(out)})
    runner = DockerRunner({"cpu": args.image})
    try:
        result = runner.run(spec)
    finally:
        runner.close()
    figures = {"suite": args.suite, "wall_s": round(result.duration_s, 1), "exit": result.exit_code,
               **counts(out / "junit.xml"), "failures": failures(out / "junit.xml"), "artifacts": str(out)}
    environment = out / "environment.json"
    if environment.exists():
        figures["environment"] = json.loads(environment.read_text())
    print(json.dumps(figures))
    return 0 if result.exit_code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
