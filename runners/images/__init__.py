"""Building the runner and service images with the `docker` CLI, from a registry base or a locally imported one.

The one owner of image building. Air-gapped hosts build a Debian bookworm base with debootstrap from the mirror
the host's apt already uses (read from apt's configuration at run time, never stored in the repository), and
pip inside the build installs only wheels downloaded into the build context beforehand with the host's pip
settings (its configured indexes, find-links and CA bundle), so the build itself needs no registry and no PyPI.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

IMAGES_DIR = Path(__file__).parent
REPO_ROOT = IMAGES_DIR.parent.parent
LOCAL_BASE = "compile-ci/base:bookworm"
TORCH_PIN = "torch==2.13.0"  # never unpinned: an unpinned torch pulls GBs of CUDA wheels
# What every runner carries beside torch: pytest, and what PyTorch's own test utilities import at load time
# (torch.testing._internal needs numpy and expecttest), so a repository's suite written in PyTorch's idiom collects
# without an [install] section; numpy also silences torch's "Failed to initialize NumPy" warning.
RUNNER_EXTRAS = ("pytest>=8", "numpy>=1.26", "expecttest>=0.2")
# What the local base carries so that it stands in for python:3.11-slim-bookworm (python, pip, venv, CAs).
BASE_PACKAGES = ("python3", "python3-pip", "python3-venv", "python-is-python3", "ca-certificates")


@dataclass(frozen=True)
class ImageRecipe:
    name: str
    tag: str
    dockerfile: Path
    sources: tuple[str, ...]  # repository paths copied into the build context
    requirements: tuple[str, ...]  # what pip downloads on the host for an air-gapped build
    # The host's find-links may hold a local CPU torch wheel (2.13.0+cpu sorts above 2.13.0): a CUDA image's torch
    # must come from the index, with its CUDA libraries, so its download ignores them.
    host_find_links: bool = True
    build_args: tuple[tuple[str, str], ...] = ()  # e.g. TORCH_VERSION for an image of another torch


def recipes() -> dict[str, ImageRecipe]:
    service_deps = tuple(tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["dependencies"])
    return {
        "cpu": ImageRecipe("cpu", "compile-ci/runner-cpu:latest", IMAGES_DIR / "cpu" / "Dockerfile",
                           ("suites", "runners/isa_check.py"), (TORCH_PIN, *RUNNER_EXTRAS)),
        "cuda": ImageRecipe("cuda", "compile-ci/runner-cuda:latest", IMAGES_DIR / "cuda" / "Dockerfile",
                            ("suites", "runners/isa_check.py"), (TORCH_PIN, *RUNNER_EXTRAS), host_find_links=False),
        # setuptools: `pip install .` builds the project in an isolated environment, offline too.
        "service": ImageRecipe("service", "compile-ci/service:latest", REPO_ROOT / "Dockerfile",
                               ("pyproject.toml", "README.md", "service", "runners", "suites"),
                               (*service_deps, "setuptools>=68", "wheel")),
    }


class ImageBuildError(RuntimeError):
    pass


SOURCE_LABEL = "org.compile-ci.source"  # hash of what went into an image: `--if-changed` skips an up-to-date one


def build_images(names: list[str], local_base: bool, rebuild_base: bool = False,
                 if_changed: bool = False, torch: str = "") -> dict[str, float]:
    """Build the named images (the runner images on torch `torch` when given: `2.14.1`, `2.14.x`); returns seconds
    per image tag built (and for the base when it was built)."""
    timings: dict[str, float] = {}
    base_args: dict[str, str] = {}
    if local_base:
        if rebuild_base or not image_exists(LOCAL_BASE):
            started = time.monotonic()
            build_local_base(LOCAL_BASE)
            timings[LOCAL_BASE] = time.monotonic() - started
        base_args = {"BASE_IMAGE": LOCAL_BASE, "PIP_INSTALL_OPTS": "--no-index"}
    from runners.images.torch_release import RUNNER_IMAGES, resolve_torch, torch_recipe

    table = recipes()
    version = resolve_torch(torch) if torch else ""
    for name in names:
        recipe = torch_recipe(table[name], version) if version and name in RUNNER_IMAGES else table[name]
        digest = source_digest(recipe)
        if if_changed and image_label(recipe.tag, SOURCE_LABEL) == digest:
            continue
        started = time.monotonic()
        with build_context(recipe, LOCAL_BASE if local_base else None) as context:
            _docker_build(recipe, context, {**base_args, **dict(recipe.build_args)}, {SOURCE_LABEL: digest})
        timings[recipe.tag] = time.monotonic() - started
    return timings


def image_exists(tag: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0


def image_label(tag: str, label: str) -> str | None:
    done = subprocess.run(["docker", "image", "inspect", "--format", f"{{{{ index .Config.Labels \"{label}\" }}}}",
                           tag], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def source_digest(recipe: ImageRecipe) -> str:
    """What the image is made of: its Dockerfile, its sources and its requirements."""
    digest = hashlib.sha256("\n".join(recipe.requirements).encode())
    files = [recipe.dockerfile]
    for source in recipe.sources:
        src = REPO_ROOT / source
        files.extend(sorted(p for p in src.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
                     if src.is_dir() else [src])
    for path in files:
        digest.update(str(path.relative_to(REPO_ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


@contextmanager
def build_context(recipe: ImageRecipe, offline_base: str | None) -> Iterator[Path]:
    """A throwaway context: the Dockerfile, the sources, and `wheels/` (empty unless downloaded for offline pip)."""
    with tempfile.TemporaryDirectory(prefix=f"compile-ci-{recipe.name}-") as tmp:
        context = Path(tmp)
        shutil.copy(recipe.dockerfile, context / "Dockerfile")
        for source in recipe.sources:
            src = REPO_ROOT / source
            if src.is_dir():
                shutil.copytree(src, context / source, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                (context / source).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(src, context / source)
        (context / "wheels").mkdir()
        if offline_base is not None:
            cache = wheel_cache(recipe)
            download(recipe.requirements, cache, offline_base, recipe.host_find_links)
            for wheel in cache.glob("*.whl"):  # hard links: a CUDA image's GBs are not copied per build
                _link_or_copy(wheel, context / "wheels" / wheel.name)
        yield context


def wheel_cache(recipe: ImageRecipe) -> Path:
    """Where a recipe's wheels stay between builds ($COMPILE_CI_WHEEL_CACHE/<image>, else the user's cache): pip
    skips what is already there, so a rebuild of the CUDA image downloads nothing."""
    root = os.environ.get("COMPILE_CI_WHEEL_CACHE") or os.path.join(Path.home(), ".cache", "compile-ci", "wheels")
    path = Path(root) / recipe.name
    path.mkdir(parents=True, exist_ok=True)
    return path


def _link_or_copy(src: Path, dest: Path) -> None:
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy(src, dest)


def download(requirements: tuple[str, ...], dest: Path, base: str, host_find_links: bool = True) -> None:
    """pip in the base image, with the host's pip settings, fetches every wheel the offline build will install.

    Run in the base rather than on the host so that environment markers (e.g. `python_full_version < "3.11.3"`)
    are judged by the interpreter the image will have. Local find-links, file:// indexes and the CA bundle are
    mounted read-only at the same paths, so the host's configuration applies unchanged.
    """
    env, paths = host_pip_settings()
    if not host_find_links:
        links = env.pop("PIP_FIND_LINKS", "").split()
        paths = [p for p in paths if p not in {item.removeprefix("file://").rstrip("/") for item in links}]
    mounts = [arg for path in paths for arg in ("-v", f"{path}:{path}:ro")]
    envs = [arg for key, value in env.items() for arg in ("-e", f"{key}={value}")]
    _run(["docker", "run", "--rm", "--network", "host", "--user", f"{os.getuid()}:{os.getgid()}",
          "-e", "HOME=/tmp", *envs, *mounts, "-v", f"{dest}:/wheels", base,
          "python", "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--dest", "/wheels", *requirements],
         "pip download")


PIP_KEYS = {"index-url": "PIP_INDEX_URL", "extra-index-url": "PIP_EXTRA_INDEX_URL", "find-links": "PIP_FIND_LINKS",
            "cert": "PIP_CERT", "trusted-host": "PIP_TRUSTED_HOST"}


def host_pip_settings() -> tuple[dict[str, str], list[str]]:
    """(PIP_* variables, local paths they name) from the host's pip configuration and environment."""
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    env: dict[str, str] = {}
    for line in listed.splitlines():
        match = re.match(r"^[^.]+\.([a-z-]+)='(.*)'$", line.strip())
        if match and match.group(1) in PIP_KEYS:
            env[PIP_KEYS[match.group(1)]] = match.group(2)
    env.update({key: os.environ[key] for key in PIP_KEYS.values() if key in os.environ})
    paths: list[str] = []
    for value in env.values():
        for item in value.split():
            path = item.removeprefix("file://").rstrip("/")
            # An index's pages link to files beside it (e.g. <root>/simple -> <root>/files): mount the root.
            path = str(Path(path).parent) if item.startswith("file://") and path.endswith("/simple") else path
            if path.startswith("/") and os.path.exists(path) and path not in paths:
                paths.append(path)
    return env, paths


def _docker_build(recipe: ImageRecipe, context: Path, build_args: dict[str, str], labels: dict[str, str]) -> None:
    args = [arg for key, value in build_args.items() for arg in ("--build-arg", f"{key}={value}")]
    args += [arg for key, value in labels.items() for arg in ("--label", f"{key}={value}")]
    # Only the legacy builder exists on some hosts; it also builds without any registry access.
    env = {**os.environ, "DOCKER_BUILDKIT": "0"}
    # Host network for apt inside the build: the host's mirror is reachable from it, whatever the bridge can reach.
    _run(["docker", "build", "--quiet", "--network", "host", "-t", recipe.tag, *args, str(context)],
         f"docker build {recipe.tag}", env=env)


# --- local base -------------------------------------------------------------------------------------


def build_local_base(tag: str) -> None:
    """debootstrap bookworm from the host's own apt mirror and `docker import` it as `tag`."""
    if shutil.which("debootstrap") is None:
        raise ImageBuildError("debootstrap is required for --local-base (apt-get install debootstrap)")
    mirror = apt_mirror()
    with tempfile.TemporaryDirectory(prefix="compile-ci-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        _run(["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", "bookworm",
              str(rootfs), mirror], "debootstrap")
        # A stand-in for python:3.11-slim, where pip installs into the system interpreter (PEP 668 is Debian's).
        for marker in rootfs.glob("usr/lib/python3*/EXTERNALLY-MANAGED"):
            marker.unlink()
        _run(["chroot", str(rootfs), "apt-get", "clean"], "apt-get clean")
        shutil.rmtree(rootfs / "var/lib/apt/lists", ignore_errors=True)
        (rootfs / "var/lib/apt/lists/partial").mkdir(parents=True)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
        assert tar.stdout is not None
        imported = subprocess.run(["docker", "import", "--change", 'CMD ["bash"]', "--change",
                                   "ENV LANG=C.UTF-8", "-", tag], stdin=tar.stdout, capture_output=True, text=True)
        tar.stdout.close()
        if tar.wait() != 0 or imported.returncode != 0:
            raise ImageBuildError(f"docker import failed: {imported.stderr.strip()}")


def apt_mirror(root: Path = Path("/")) -> str:
    """The first Debian mirror the host's apt uses for bookworm (deb822 .sources and one-line .list files)."""
    # apt reads only *.list and *.sources there; anything else (e.g. a disabled file) is not a source.
    listed = sorted((root / "etc/apt/sources.list.d").glob("*"))
    files = [root / "etc/apt/sources.list", *(p for p in listed if p.suffix in (".list", ".sources"))]
    for path in files:
        if not path.is_file():
            continue
        for uri, suites in _apt_entries(path):
            if "bookworm" in suites and not uri.rstrip("/").endswith("-security"):
                return uri
    raise ImageBuildError("no Debian bookworm mirror found in apt's sources; cannot build a local base")


def _apt_entries(path: Path) -> Iterator[tuple[str, list[str]]]:
    text = path.read_text()
    if path.suffix == ".sources" or re.search(r"^Types:", text, re.MULTILINE):
        for stanza in re.split(r"\n\s*\n", text):
            fields = dict(re.findall(r"^([A-Za-z-]+):\s*(.*)$", stanza, re.MULTILINE))
            for uri in fields.get("URIs", "").split():
                yield uri, fields.get("Suites", "").split()
        return
    for line in text.splitlines():
        parts = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()
        if len(parts) >= 3 and parts[0] == "deb":
            yield parts[1], [parts[2]]


def _run(command: list[str], what: str, env: dict[str, str] | None = None) -> None:
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip()[-2000:]
        raise ImageBuildError(f"{what} failed (exit {done.returncode}):\n{tail}")
