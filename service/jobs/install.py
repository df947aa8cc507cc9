"""The install phase: a repository's [install] requirements and its own package, before its tests run.

Trusted half (here, on the worker, never with the pull request's code): `pip download --only-binary=:all:` from
the deployment's indexes into a wheelhouse, then the wheels are unpacked (`pip install --target`, which runs no
package code) into a site directory. Both are cached per key = (requirements, indexes, runner image/torch), so a
second run neither downloads nor installs. The job gets that directory read-only, and its command is wrapped by
install_step.py, which installs the checkout itself offline, inside the job.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

from runners.job_log import append_text
from runners.local import private_dir
from runners.protocol import RunResult
from service.config import Settings
from service.github.markdown import code_block
from service.jobs.install_step import COPY_NAME, INSTALL_EXIT
from service.jobs.lifecycle import Conclusion, Outcome
from service.jobs.outcome import Attempt, read_json
from service.wheel_store import WHEELS_FILE, sha256_of, store_wheel, wheel_path

log = logging.getLogger(__name__)
STEP_SOURCE = (Path(__file__).parent / "install_step.py").read_text()
INSTALL_TITLE = "Install failed"
PIP_TIMEOUT_S = 900
_READY = "ready"
# What pip on the worker may see of the worker's environment: never the App's secrets.
_PIP_ENV_PREFIXES = ("PIP_", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")
_PIP_ENV_NAMES = ("PATH", "HOME", "LANG", "LC_ALL", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "XDG_CONFIG_HOME")


class InstallFailed(Exception):
    """The requirements could not be resolved or unpacked: the pull request's problem, not the service's."""

    def __init__(self, stage: str, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.stage, self.lines = stage, lines


def install_key(requirements: tuple[str, ...], settings: Settings, runner_key: str) -> str:
    material = json.dumps([sorted(requirements), settings.pip_index_url, list(settings.pip_extra_index_urls),
                           runner_key, sys.version_info[:2]])
    return hashlib.sha256(material.encode()).hexdigest()[:24]


def prepare(settings: Settings, requirements: tuple[str, ...], runner_key: str) -> Path | None:
    """The site directory holding the requirements (downloaded and unpacked once per key), or None if none."""
    if not requirements:
        return None
    root = settings.data_dir / "install" / install_key(requirements, settings, runner_key)
    site = root / "site"
    if (root / _READY).exists():
        return site
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two jobs of one run want the same environment: one builds it
        if (root / _READY).exists():
            return site
        _build(settings, requirements, root)
    return site


def _build(settings: Settings, requirements: tuple[str, ...], root: Path) -> None:
    staging = root / f"staging-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    (staging / "requirements.txt").write_text("".join(f"{r}\n" for r in requirements))
    indexes = [*(["--index-url", settings.pip_index_url] if settings.pip_index_url else []),
               *(arg for url in settings.pip_extra_index_urls for arg in ("--extra-index-url", url))]
    try:
        _pip("download", ["download", "--only-binary=:all:", "--dest", str(staging / "wheelhouse"), *indexes,
                          "-r", str(staging / "requirements.txt")], root)
        _pip("unpack", ["install", "--no-index", "--only-binary=:all:", "--find-links", str(staging / "wheelhouse"),
                        "--target", str(staging / "site"), "--no-compile", "-r", str(staging / "requirements.txt")],
             root)
        for name in ("site", "wheelhouse"):  # a crash between renames left a half; ready was never written
            shutil.rmtree(root / name, ignore_errors=True)
        (staging / "site").rename(root / "site")
        (staging / "wheelhouse").rename(root / "wheelhouse")
        (root / _READY).write_text("\n".join(requirements) + "\n")
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _pip(stage: str, args: list[str], root: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k.startswith(_PIP_ENV_PREFIXES) or k in _PIP_ENV_NAMES}
    env.update({"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"})
    try:
        proc = subprocess.run([sys.executable, "-m", "pip", *args], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=PIP_TIMEOUT_S, cwd=root)
    except subprocess.TimeoutExpired:
        raise InstallFailed(stage, [f"pip {args[0]} did not finish within {PIP_TIMEOUT_S} s"]) from None
    with open(root / "pip.log", "a") as log:
        log.write(f"$ pip {' '.join(args)}\n{proc.stdout}")
    if proc.returncode != 0:
        raise InstallFailed(stage, _error_lines(proc.stdout))


def record_wheels(out: Path, site: Path | None, requirements: tuple[str, ...], artifacts_dir: Path,
                  repo_id: int) -> None:
    """For `compile-ci repro`: the attempt's wheels.json (the requirements and the wheels the job's environment was
    unpacked from) and each wheel in the repository's wheel store, where the pages serve it."""
    wheels: list[dict[str, str | int]] = []
    try:
        if site is not None:
            wheels = _wheel_list(site.parent)
            for wheel in wheels:
                store_wheel(site.parent / "wheelhouse" / str(wheel["name"]),
                            wheel_path(artifacts_dir, repo_id, str(wheel["sha256"])))
        (out / WHEELS_FILE).write_text(json.dumps({"requirements": list(requirements), "wheels": wheels}, indent=2))
    except OSError as exc:  # a repro without the job's wheels is no reason to fail the job (the repro says so)
        log.warning("the job's wheels were not recorded for repros: %s", exc)


def _wheel_list(root: Path) -> list[dict[str, str | int]]:
    """The environment's wheels with their sha256, hashed once per environment (its key never changes them)."""
    listed = root / "wheels.json"
    if listed.exists():
        return list(json.loads(listed.read_text()))
    wheels: list[dict[str, str | int]] = [{"name": w.name, "sha256": sha256_of(w), "size": w.stat().st_size}
                                          for w in sorted((root / "wheelhouse").glob("*.whl"))]
    partial = root / f"wheels.json.{os.getpid()}"
    partial.write_text(json.dumps(wheels))
    partial.replace(listed)
    return wheels


def _error_lines(output: str) -> list[str]:
    """pip's own complaint: its ERROR lines (and what follows them), not the progress chatter before."""
    lines = [line.rstrip() for line in output.splitlines() if line.strip()]
    first = next((i for i, line in enumerate(lines) if line.startswith("ERROR")), max(0, len(lines) - 20))
    return lines[first:first + 40]


def wrap(command: list[str], python: str, checkout: Path, site: Path | None, package: bool) -> list[str]:
    """The job's command, preceded by the in-job install of the checkout (see install_step.py)."""
    return [python, "-c", STEP_SOURCE, str(checkout), str(site or ""), "1" if package else "0", "--", *command]


def shown(command: tuple[str, ...]) -> tuple[str, ...]:
    """The command as the log's first line shows it: the step's source would bury it."""
    return tuple("<install step>" if arg == STEP_SOURCE else arg for arg in command)


def source_roots(out: Path) -> list[str]:
    """Where the job's copy of the checkout lives (the container's /tmp, LocalRunner's scratch): failures located
    there are in the repository's files."""
    return [f"/tmp/{COPY_NAME}", str(private_dir(out) / "tmp" / COPY_NAME)]


def failed_result(out: Path, exc: InstallFailed) -> RunResult:
    """A failure of the trusted half: recorded like the in-job half's, so the judge tells one story."""
    (out / "install.json").write_text(json.dumps({"ok": False, "stage": exc.stage, "lines": exc.lines}))
    append_text(out / "log.txt",
                "compile-ci: installing the [install] requirements failed:\n" + "\n".join(exc.lines) + "\n")
    return RunResult(INSTALL_EXIT, 0.0)


def judged(out: Path, result: RunResult, attempt: Attempt) -> Outcome | None:
    """"Install failed" with pip's lines when the install phase failed; None otherwise."""
    if result.exit_code != INSTALL_EXIT or result.infra_error:
        return None
    data = read_json(out / "install.json")  # the in-job half wrote it: untrusted, bounded
    if not data:
        return None
    what = "the [install] requirements" if data.get("stage") in ("download", "unpack") else "the repository itself"
    raw = data.get("lines")
    lines = "\n".join(str(line)[:1000] for line in (raw if isinstance(raw, list) else [])[:200])[-6000:]
    detail = f"Nothing was tested: installing {what} failed.\n\n{code_block(lines)}"
    torch = str(attempt.environment.get("torch_version", ""))
    return Outcome(Conclusion.FAILURE, INSTALL_TITLE, detail, attempt.counts, torch)
