"""A worker's metrics directory in the shared temporary directory: its own, named by its pid; those of workers that
are gone are removed when the next one starts, and nothing else there is touched (a link planted under that name
is not followed)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from service.observability.worker import METRICS_PREFIX, own_metrics_dir


def test_a_gone_workers_directory_goes_and_nothing_else_does(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])  # noqa: S607
    dead.wait()
    left = tmp_path / f"{METRICS_PREFIX}{dead.pid}-abc"
    (left / "sub").mkdir(parents=True)
    (left / "sub" / "counter_1.db").write_bytes(b"x")
    alive = tmp_path / f"{METRICS_PREFIX}{os.getpid()}-def"
    alive.mkdir()
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("mine")
    planted = tmp_path / f"{METRICS_PREFIX}{dead.pid}-link"
    planted.symlink_to(victim)
    other = tmp_path / f"{METRICS_PREFIX}notapid-x"
    other.mkdir()

    own = own_metrics_dir(tmp_path)

    assert own.is_dir() and own.name.startswith(f"{METRICS_PREFIX}{os.getpid()}-")
    assert not left.exists()
    assert alive.is_dir() and other.is_dir() and planted.is_symlink()
    assert (victim / "keep").read_text() == "mine"
    # The next one of this process (a second app in one process) finds this one alive and keeps it.
    assert own_metrics_dir(tmp_path) != own and own.is_dir()
