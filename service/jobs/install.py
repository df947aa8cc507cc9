"""The install phase: a repository's [install] requirements and its own package, before its tests run.

Trusted half (here, on the worker, never with the pull request's code): the requirements are resolved against what
the runner provides (the image's torch is never downloaded nor replaced), the other wheels
are downloaded (`pip download --only-binary=:all: --no-deps`) from the deployment's indexes into a wheelhouse and
unpacked (`pip install --target`, which runs no package code) into a site directory. Both are cached per key =
(requirements, indexes, runner image/torch), so a second run neither downloads nor installs. The job gets that
directory read-only, and its command is wrapped by install_step.py, which installs the checkout itself offline.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import re
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


# What the runner image brings and a job tests: a requirement may depend on them (torchvision on torch) but they are
# never downloaded into the job's site directory, which comes first on the job's path and would shadow them.
IMAGE_PROVIDED = ("torch", "pytest")
# A DockerRunner's cache key ends with the image's torch version (its org.compile-ci.torch-version label).
_KEY_TORCH = re.compile(r"-torch(\d[^\s/]*)$")
# pip run so that it sees no installed package but the stubs in argv[1]: its own modules are imported first, then
# sys.path keeps only the standard library (no site-packages, no .pth-added paths) and the stub directory.
_ISOLATED_PIP = """
import os, sys, sysconfig
from pip._internal.cli.main import main
roots = tuple(sysconfig.get_paths()[name] for name in ("stdlib", "platstdlib"))
sys.path[:] = [p for p in sys.path if p.startswith(roots) and "-packages" not in p] + [sys.argv[1]]
sys.exit(main(sys.argv[2:]))
"""


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
        _build(settings, requirements, root, runner_key)
    return site


def runner_torch(runner_key: str) -> str | None:
    """The torch version a DockerRunner's image provides, from its cache key; None for another runner."""
    match = _KEY_TORCH.search(runner_key)
    return match.group(1) if match else None


def _stub_environment(staging: Path, runner_key: str) -> Path | None:
    """For a runner image: a directory whose only "installed" distribution is the image's torch, for pip to resolve
    against (the worker's own packages are not the image's). None for the LocalRunner, whose jobs run the worker's
    own interpreter: pip resolves against that environment as it is."""
    if runner_key.startswith("local-"):
        return None
    stubs = staging / "provided"
    version = runner_torch(runner_key)
    if version:
        info = stubs / f"torch-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
    stubs.mkdir(exist_ok=True)
    return stubs


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _resolve(requirements: Path, indexes: list[str], staging: Path, root: Path, runner_key: str) -> list[str]:
    """``name==version`` of every wheel the requirements need beyond what the runner provides; a requirement that
    would replace the image's torch (or pytest) fails the install, naming who asks for which version."""
    report = staging / "report.json"
    _pip("resolve", ["install", "--dry-run", "--only-binary=:all:", "--report", str(report), *indexes,
                     "-r", str(requirements)], root, isolated=_stub_environment(staging, runner_key))
    wanted = json.loads(report.read_text()).get("install", [])
    pins, clashes = [], []
    for item in wanted:
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        if _canonical(name) not in IMAGE_PROVIDED:
            pins.append(f"{name}=={version}")
            continue
        has = runner_torch(runner_key) if name == "torch" else None
        askers = [f"{other['metadata']['name']} {other['metadata']['version']} requires {line.split(';')[0]}"
                  for other in wanted for line in other["metadata"].get("requires_dist", [])
                  if _canonical(re.split(r"[\s\[<>=!~;(]", line, maxsplit=1)[0]) == _canonical(name)]
        clashes.append(f"ERROR: {'; '.join(askers) or f'the requirements ask for {name} {version}'}, but {name} "
                       f"is the runner image's ({has or 'another version'}) and is never replaced: choose releases "
                       f"built for it")
    if clashes:
        raise InstallFailed("resolve", clashes)
    return pins


def _build(settings: Settings, requirements: tuple[str, ...], root: Path, runner_key: str) -> None:
    staging = root / f"staging-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    (staging / "requirements.txt").write_text("".join(f"{r}\n" for r in requirements))
    indexes = [*(["--index-url", settings.pip_index_url] if settings.pip_index_url else []),
               *(arg for url in settings.pip_extra_index_urls for arg in ("--extra-index-url", url))]
    try:
        pins = _resolve(staging / "requirements.txt", indexes, staging, root, runner_key)
        (staging / "pinned.txt").write_text("".join(f"{pin}\n" for pin in pins))
        (staging / "wheelhouse").mkdir()
        (staging / "site").mkdir()
        if pins:  # exactly the resolved wheels: --no-deps, so nothing the runner provides comes along
            _pip("download", ["download", "--only-binary=:all:", "--no-deps", "--dest", str(staging / "wheelhouse"),
                              *indexes, "-r", str(staging / "pinned.txt")], root)
            _pip("unpack", ["install", "--no-index", "--only-binary=:all:", "--no-deps", "--find-links",
                            str(staging / "wheelhouse"), "--target", str(staging / "site"), "--no-compile",
                            "-r", str(staging / "pinned.txt")], root)
        for name in ("site", "wheelhouse"):  # a crash between renames left a half; ready was never written
            shutil.rmtree(root / name, ignore_errors=True)
        (staging / "site").rename(root / "site")
        (staging / "wheelhouse").rename(root / "wheelhouse")
        (root / _READY).write_text("\n".join(requirements) + "\n")
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _pip(stage: str, args: list[str], root: Path, isolated: Path | None = None) -> None:
    env = {k: v for k, v in os.environ.items() if k.startswith(_PIP_ENV_PREFIXES) or k in _PIP_ENV_NAMES}
    env.update({"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"})
    launcher = ["-c", _ISOLATED_PIP, str(isolated)] if isolated is not None else ["-m", "pip"]
    try:
        proc = subprocess.run([sys.executable, *launcher, *args], env=env, stdout=subprocess.PIPE,
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
    what = "the repository itself" if data.get("stage") == "package" else "the [install] requirements"
    raw = data.get("lines")
    lines = "\n".join(str(line)[:1000] for line in (raw if isinstance(raw, list) else [])[:200])[-6000:]
    detail = f"Nothing was tested: installing {what} failed.\n\n{code_block(lines)}"
    torch = str(attempt.environment.get("torch_version", ""))
    return Outcome(Conclusion.FAILURE, INSTALL_TITLE, detail, attempt.counts, torch)
