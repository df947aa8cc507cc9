"""A private Redis and the GitHub emulator with one installed repository, for the benches that drive the service
end to end (bench/pr_cost.py, bench/base_compare.py, bench/shards.py)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from service.devkit.github_emulator import GitHubEmulator
from service.devkit.sandbox.stack import APP_ID, app_keypair, free_port, wait_for_port


@contextlib.contextmanager
def private_stack(root: Path, full_name: str, installation_id: int) -> Iterator[tuple[str, GitHubEmulator, str]]:
    """(Redis URL, the emulator, the App's private key); Redis stopped and `root` removed afterwards."""
    port = free_port()
    redis = subprocess.Popen([os.environ.get("COMPILE_CI_REDIS_SERVER", "redis-server"), "--port", str(port),
                              "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(root)],
                             stdout=subprocess.DEVNULL)
    try:
        wait_for_port(port, redis, "redis-server")
        private_key, public_key = app_keypair()
        with GitHubEmulator(app_id=APP_ID, public_key_pem=public_key) as emulator:
            emulator.add_repo(full_name)
            emulator.add_installation(installation_id, repos=[full_name])
            yield f"redis://127.0.0.1:{port}/0", emulator, private_key
    finally:
        redis.terminate()
        redis.wait(timeout=10)
        shutil.rmtree(root, ignore_errors=True)
