"""The wheels a job's environment was unpacked from, kept for `compile-ci repro`: listed per attempt in
`wheels.json` (written by the worker, a name no job can write: runners/outbox.py), stored once per repository
under the artifacts by sha256, so a developer installs the very files the job ran with."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path

WHEELS_FILE = "wheels.json"
WHEEL_NAME = re.compile(r"[A-Za-z0-9_.+-]{1,200}\.whl")
SHA256 = re.compile(r"[0-9a-f]{64}")


def wheel_path(artifacts_dir: Path, repo_id: int, sha256: str) -> Path:
    """One folder per repository: a wheels.json naming another repository's wheel (by its hash) reaches nothing."""
    return artifacts_dir / "wheels" / str(repo_id) / f"{sha256}.whl"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def store_wheel(source: Path, target: Path) -> None:
    """Copied under a temporary name and renamed: two jobs storing the same wheel never leave half of one."""
    if target.exists():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}")
    shutil.copyfile(source, partial)
    os.replace(partial, target)
