"""The linker of a job's C++ builds: inductor's kernels link with lld in both runners; COMPILE_CI_LINKER=system
keeps GNU ld. Told apart by what each linker writes into the object's .comment section (lld: "Linker: ... LLD")."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from runners.compile_cache import TRUSTED, CacheScope, RepoCache
from runners.protocol import Runner, RunSpec
from runners.toolchain import linker_env
from service.config import ConfigError, Settings

COMPILE = ("import torch\n"
           "f = torch.compile(lambda x: (x.sin() * 3).relu() + 1, backend='inductor')\n"
           "print('kernel ok', bool((f(torch.randn(16)) >= 1).all()))\n")


def _linkers(directory: Path) -> set[str]:
    """What the .comment section of every shared object under `directory` names as its linker."""
    found = set()
    for shared in directory.rglob("*.so"):
        comment = subprocess.run(["readelf", "-p", ".comment", str(shared)], capture_output=True, text=True).stdout
        found.add("lld" if "LLD" in comment else "gnu")
    return found


def _compile_job(runner: Runner, tmp_path: Path) -> Path:
    scope = CacheScope(tmp_path / "cache", "101", TRUSTED)
    spec = RunSpec(job_id="link", command=(runner.python, "-c", COMPILE), checkout_dir=tmp_path,
                   output_dir=tmp_path / "out", timeout_s=300, cache=scope)
    result = runner.run(spec)
    assert result.exit_code == 0 and "kernel ok True" in spec.log_path.read_text(), spec.log_path.read_text()
    return RepoCache.of(scope, runner.cache_key("cpu")).trusted_dir / "inductor"


def test_inductor_kernels_link_with_lld(runner: Runner, tmp_path: Path) -> None:
    assert Path("/usr/bin/ld.lld").exists(), "lld is part of the install (scripts/setup.sh, the runner images)"
    assert _linkers(_compile_job(runner, tmp_path)) == {"lld"}


def test_the_system_linker_when_asked(runner: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPILE_CI_LINKER", "system")
    assert _linkers(_compile_job(runner, tmp_path)) == {"gnu"}


def test_an_unknown_linker_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    required = {"COMPILE_CI_WEBHOOK_SECRET": "s", "COMPILE_CI_GITHUB_APP_ID": "1",
                "COMPILE_CI_GITHUB_PRIVATE_KEY": "-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----"}
    Settings.from_env({**required, "COMPILE_CI_LINKER": "system"})
    with pytest.raises(ConfigError, match="COMPILE_CI_LINKER must be one of lld, system, got 'mold'"):
        Settings.from_env({**required, "COMPILE_CI_LINKER": "mold"})  # at the worker's start, not at a job
    monkeypatch.setenv("COMPILE_CI_LINKER", "mold")
    with pytest.raises(ValueError, match="COMPILE_CI_LINKER must be one of lld, system, got 'mold'"):
        linker_env(in_image=False)

