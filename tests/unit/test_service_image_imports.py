"""The service's image has no torch, pytest or numpy (only the runner images do): every module of `service` must
import without them, or the web, worker-github and beat containers crash at start (as `service.planning.selection`
once did, importing the job-side shard plugin and with it pytest)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from service.devkit.sandbox.stack import app_keypair

ROOT = Path(__file__).resolve().parents[2]
PROBE = r'''
import importlib, pkgutil, sys

class Absent:
    """What the service image lacks: importing it fails as it would there."""
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "pytest", "numpy"):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None

sys.meta_path.insert(0, Absent())
import service
failed = []
for info in pkgutil.walk_packages(service.__path__, "service."):
    try:
        importlib.import_module(info.name)
    except Exception as exc:
        failed.append(f"{info.name}: {type(exc).__name__}: {exc}")
print("\n".join(failed))
print(f"{len(failed)} failed")
'''


def test_every_service_module_imports_without_torch_pytest_or_numpy(tmp_path: Path) -> None:
    private_key, _public = app_keypair()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COMPILE_CI_WEBHOOK_SECRET": "s", "COMPILE_CI_GITHUB_APP_ID": "1",
           "COMPILE_CI_GITHUB_PRIVATE_KEY": private_key, "COMPILE_CI_DATA_DIR": str(tmp_path),
           "COMPILE_CI_DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}"}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("0 failed"), done.stdout[-3000:]
