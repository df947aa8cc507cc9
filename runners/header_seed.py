"""Inductor's precompiled C++ header, built once per worker host and runner build, laid under every job's cache.

Every process that compiles a CPU kernel first needs `precompiled_headers/<hash>.h.gch` (~150 MB) in its cache
(suites/header_seed.py says what it is and why the name is a content key). A job whose cache lacks it builds it:
about 6 s on a quiet 2-core host — a repository's first jobs, and every pull-request job before the default
branch's first push, since an untrusted job's layer is thrown away. The header is the same for every job of one
build on one CPU, so the worker keeps one copy (the seed) and every job's cache starts with it:
- trusted jobs: copied into the repository's trusted directory, once (it stays, as if a job had built it);
- untrusted jobs on an overlay: the seed is the overlay's lowest layer (read-only, nothing copied);
- untrusted jobs on a copy (LocalRunner, `untrusted_layer = "copy"`): copied into the job's private copy.
No job writes the seed: it comes from the runner image (built there, where no job runs; the worker archives it
out of the image once) or, for the LocalRunner, from the worker running the same build in its own process. Its
files are checked as they arrive (regular files with inductor's header names, nothing else). A job whose flags
differ (another CPU level pinned) finds no file of its name and builds its own, as before.

Where: `<seed root>/.seeds/<runner cache key>/<build>/precompiled_headers/`, the seed root being the data
directory's cache (`COMPILE_CI_HEADER_SEED_DIR` overrides it: one host, several data directories, one seed).
"""

from __future__ import annotations

import fcntl
import io
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from suites.header_seed import HEADER_DIR, NAME

log = logging.getLogger(__name__)

SEED_ENV = "COMPILE_CI_HEADER_SEED_DIR"
IMAGE_SEED = "/opt/compile-ci/seed"  # where a runner image's build leaves it (runners/images/cpu/Dockerfile)
MAX_FILE_BYTES = 1 << 30
BUILD_TIMEOUT_S = 600

Builder = Callable[[Path], None]  # fills <dir>/precompiled_headers/


def seed_dir(cache_root: Path, runner_key: str, build: str) -> Path:
    """'.seeds' cannot be a repository's directory (a repository's name never starts with a dot)."""
    root = Path(os.environ.get(SEED_ENV) or cache_root)
    return root / ".seeds" / _plain(runner_key) / _plain(build)


def ensure(directory: Path, build: Builder, uid: int | None = None) -> Path | None:
    """The seed at `directory`, built by `build` the first time (one builder at a time; other builds of the same
    runner key removed). None when it cannot be had: the job then builds its header itself, as without a seed.
    `uid`: the jobs' user, who must be able to add files beside the seed's in an overlay's merged directory (inductor
    takes a lock there, and a job on another CPU adds its own header; both land in the job's upper layer). The
    files themselves stay read-only and the worker's."""
    if (directory / HEADER_DIR).is_dir():
        return directory
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
        with open(directory.parent / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                if not (directory / HEADER_DIR).is_dir():
                    _build(directory, build, uid)
            finally:  # unlocked, not only closed: a process forked meanwhile holds a copy of this descriptor
                fcntl.flock(lock, fcntl.LOCK_UN)
    except Exception as exc:  # noqa: BLE001 - an image without a seed, an engine error: the job builds its own
        log.warning("header seed %s: not built (%s); jobs build their own header", directory, exc)
        return None
    return directory


def _build(directory: Path, build: Builder, uid: int | None) -> None:
    scratch = Path(tempfile.mkdtemp(prefix=".building-", dir=directory.parent))
    try:
        (scratch / HEADER_DIR).mkdir()
        build(scratch)
        _check(scratch / HEADER_DIR)
        if uid is not None and os.geteuid() == 0:
            os.chown(scratch / HEADER_DIR, uid, uid)
        elif uid is not None and os.geteuid() != uid:
            os.chmod(scratch / HEADER_DIR, 0o777)
        for old in directory.parent.iterdir():
            if old.is_dir() and old != scratch:
                shutil.rmtree(old, ignore_errors=True)
        os.chmod(scratch, 0o755)
        scratch.rename(directory)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def remembered(memo: dict[str, Path | None], build: str, make: Callable[[], Path | None]) -> Path | None:
    """A runner's seed for `build`, made by `make()` once per process, and again when its directory went away (a
    cache directory cleaned under a running worker): a job is never handed a seed that is not there. A build that
    gave none is not tried again in this process."""
    seed = memo.get(build)
    if build not in memo or (seed is not None and not (seed / HEADER_DIR).is_dir()):
        memo[build] = make()
    return memo[build]


def install(seed: Path | None, cache_dir: Path, uid: int | None = None, cap_bytes: int = 1 << 62) -> list[str]:
    """Copy the seed's files that `cache_dir` lacks into it (a trusted directory, or an untrusted job's private
    copy). A file already there stays: it has the same name, so the same content. A seed larger than the
    repository's cache cap is not laid there (it would be evicted at the job's end, and copied again)."""
    try:
        files = sorted((seed / HEADER_DIR).iterdir()) if seed is not None else []
        if not files or sum(f.stat().st_size for f in files) > cap_bytes:
            return []
    except FileNotFoundError:  # removed since the runner last looked: the job builds its own header
        return []
    target = cache_dir / HEADER_DIR
    added: list[str] = []
    for source in files:
        dest = target / source.name
        if os.path.lexists(dest):
            continue
        if not target.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            if uid is not None and os.geteuid() == 0:
                os.chown(target, uid, uid)
        partial = target / f".{source.name}.seed-{os.getpid()}"
        subprocess.run(["cp", "--reflink=auto", str(source), str(partial)], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)
        os.replace(partial, dest)
        added.append(source.name)
    return added


def from_archive(read: Callable[[], Iterable[bytes]]) -> Builder:
    """A builder that unpacks a tar stream of the image's `precompiled_headers` directory (the engine's archive)."""
    def build(scratch: Path) -> None:
        data = io.BytesIO(b"".join(read()))
        with tarfile.open(fileobj=data, mode="r:") as archive:
            for member in archive:
                name = Path(member.name).name
                if member.isdir() and name == HEADER_DIR:
                    continue
                if not (member.isfile() and NAME.fullmatch(name) and member.size <= MAX_FILE_BYTES
                        and member.name in (f"{HEADER_DIR}/{name}", name)):
                    raise ValueError(f"unexpected entry in the image's header seed: {member.name!r}")
                source = archive.extractfile(member)
                assert source is not None
                with open(scratch / HEADER_DIR / name, "xb") as out:
                    shutil.copyfileobj(source, out)
    return build


def from_interpreter(python: str, env: Mapping[str, str]) -> Builder:
    """A builder that runs suites/header_seed.py with `python` in a job's environment (the LocalRunner's)."""
    def build(scratch: Path) -> None:
        repo = str(Path(__file__).resolve().parents[1])
        run_env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [repo, env.get("PYTHONPATH")]))}
        subprocess.run([python or sys.executable, "-m", "suites.header_seed", str(scratch)], env=run_env, check=True,
                       capture_output=True, timeout=BUILD_TIMEOUT_S)
    return build


def _check(directory: Path) -> None:
    for entry in directory.iterdir():
        if entry.is_symlink() or not entry.is_file() or not NAME.fullmatch(entry.name):
            raise ValueError(f"unexpected entry in a header seed: {entry.name!r}")
        os.chmod(entry, 0o444)


def _plain(text: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in "_.-" else "-" for c in text).strip(".-")[:120]
    return cleaned or "none"
