"""A job's C++ toolchain. The linker: inductor's kernels link with lld in both runners; COMPILE_CI_LINKER=system
keeps GNU ld. Told apart by what each linker writes into the object's .comment section (lld: "Linker: ... LLD").
The vector-ISA probe: checked once per toolchain (runners/isa_check.py), so a job builds no probe programs and
still picks the ISA inductor's own probe picks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runners import toolchain
from runners.compile_cache import TRUSTED, CacheScope, RepoCache
from runners.protocol import Runner, RunSpec
from runners.toolchain import linker_env, source_keys_env, vec_isa_env
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


PICK = ("import json, os\n"
        "from pathlib import Path\n"
        "from torch._inductor import cpu_vec_isa as m\n"
        "isa = m.pick_vec_isa()\n"
        "sources = [p.read_text() for p in Path(os.environ['TORCHINDUCTOR_CACHE_DIR']).rglob('*.cpp')]\n"
        "print(json.dumps({'isa': str(isa), 'flags': isa.build_arch_flags(),\n"
        "                  'probe_builds': sum(m.VecISA._avx_code.strip() in s for s in sources)}))\n")
# The job picks its ISA as every job does, then a child without TORCHINDUCTOR_VEC_ISA_OK (and its own cache) picks
# with inductor's full probe: the same ISA and the same compiler flags, or the skip would change generated code.
ISA_JOB = ("import json, os, subprocess, sys, tempfile\n"
           f"PICK = {PICK!r}\n"
           "job = subprocess.run([sys.executable, '-c', PICK], capture_output=True, text=True, check=True).stdout\n"
           "env = {k: v for k, v in os.environ.items() if k != 'TORCHINDUCTOR_VEC_ISA_OK'}\n"
           "env['TORCHINDUCTOR_CACHE_DIR'] = tempfile.mkdtemp()\n"
           "probed = subprocess.run([sys.executable, '-c', PICK], env=env, capture_output=True, text=True,\n"
           "                        check=True).stdout\n"
           "print('ISA', json.dumps({'env': os.environ.get('TORCHINDUCTOR_VEC_ISA_OK'), 'job': json.loads(job),\n"
           "                         'probed': json.loads(probed)}))\n"
           # then the job's own kernel, linked into its cache: one cold job proves both (each one costs half a minute)
           + COMPILE)


def test_a_job_links_with_lld_and_skips_the_vector_isa_probe_picking_what_it_picks(runner: Runner,
                                                                                   tmp_path: Path) -> None:
    assert Path("/usr/bin/ld.lld").exists(), "lld is part of the install (scripts/setup.sh, the runner images)"
    scope = CacheScope(tmp_path / "cache", "101", TRUSTED)
    spec = RunSpec(job_id="isa", command=(runner.python, "-c", ISA_JOB), checkout_dir=tmp_path,
                   output_dir=tmp_path / "out", timeout_s=300, cache=scope)
    assert runner.run(spec).exit_code == 0, spec.log_path.read_text()
    assert "kernel ok True" in spec.log_path.read_text(), spec.log_path.read_text()
    assert _linkers(RepoCache.of(scope, runner.cache_key("cpu")).trusted_dir / "inductor") == {"lld"}
    line = next(x for x in spec.log_path.read_text().splitlines() if x.startswith("ISA "))
    seen = json.loads(line[4:])
    assert seen["env"] == "1"  # the image's build checked the toolchain; the LocalRunner checked it once
    assert seen["job"]["probe_builds"] == 0, "the job built inductor's vector-ISA probe program"
    assert seen["probed"]["probe_builds"] >= 1, "the control run did not probe: the comparison proves nothing"
    assert (seen["job"]["isa"], seen["job"]["flags"]) == (seen["probed"]["isa"], seen["probed"]["flags"]), seen
    assert seen["job"]["isa"].startswith("avx"), seen


def test_a_toolchain_that_fails_the_check_keeps_the_probe() -> None:
    broken = {**os.environ, "CXX": "/bin/false"}  # inductor builds with $CXX: every ISA's build fails
    assert vec_isa_env(sys.executable, broken) == {}
    assert vec_isa_env(sys.executable, dict(os.environ)) == {"TORCHINDUCTOR_VEC_ISA_OK": "1"}


def test_a_workers_host_checks_are_taken_for_their_interpreters_and_toolchains_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """COMPILE_CI_HOST_CHECKS (the operator's, checked once for a host's worker processes) stands in for the checks
    of exactly the interpreter, toolchain and CPU it names; any other, or a value that is not what the checks print, is
    checked here. The interpreters do not exist: a check that ran would fail, so a verdict of true or a key can only
    come from the variable."""
    monkeypatch.setattr(toolchain, "_isa_verdicts", {})
    monkeypatch.setattr(toolchain, "_source_keys", {})
    env = {"COMPILER_PATH": "/opt/lld", "CXX": ""}
    named = toolchain.given_key("/nowhere/python", env)
    other_cpu = json.dumps(("/nowhere/python", "/opt/lld", "", "another CPU's flags"))
    monkeypatch.setenv(toolchain.HOST_CHECKS_ENV, json.dumps(
        {"isa": {named: True}, "source_keys": {"/nowhere/python": "the given keys"}}))
    assert vec_isa_env("/nowhere/python", env) == {"TORCHINDUCTOR_VEC_ISA_OK": "1"}
    assert source_keys_env("/nowhere/python", env) == {"COMPILE_CI_SOURCE_KEYS": "the given keys"}
    # another toolchain or interpreter: checked here (and failing, since neither interpreter exists)
    assert vec_isa_env("/nowhere/python", {"COMPILER_PATH": "", "CXX": ""}) == {}
    assert vec_isa_env("/nowhere/other", env) == {}
    # checked on a CPU of other flags (a value carried to another host): not taken here
    monkeypatch.setattr(toolchain, "_isa_verdicts", {})
    monkeypatch.setenv(toolchain.HOST_CHECKS_ENV, json.dumps({"isa": {other_cpu: True}}))
    assert vec_isa_env("/nowhere/python", env) == {}
    assert source_keys_env("/nowhere/other", env) == {}
    for junk in ("not json", "[1, 2]", json.dumps({"isa": {named: "yes"}, "source_keys": {"/nowhere/python": 3}})):
        monkeypatch.setattr(toolchain, "_isa_verdicts", {})
        monkeypatch.setattr(toolchain, "_source_keys", {})
        monkeypatch.setenv(toolchain.HOST_CHECKS_ENV, junk)
        assert vec_isa_env("/nowhere/python", env) == {} and source_keys_env("/nowhere/python", env) == {}, junk


def test_the_host_checks_a_test_run_took_are_what_a_worker_checks() -> None:
    """tests/conftest.py checked this run's interpreters once with `python -m runners.toolchain` (every worker
    process of the run takes them from COMPILE_CI_HOST_CHECKS): they are the checks' own results on this host."""
    given = json.loads(os.environ[toolchain.HOST_CHECKS_ENV])
    env = toolchain.host_env()
    assert given["isa"][toolchain.given_key(sys.executable, env)] is True, given["isa"]
    keys = json.loads(given["source_keys"][sys.executable])
    from suites import source_keys

    assert keys == source_keys.compute()
