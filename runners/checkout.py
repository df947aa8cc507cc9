"""Checkout of repo@sha with git: a bare mirror per repository, then an export of the one commit."""

from __future__ import annotations

import base64
import fcntl
import logging
import os
import subprocess
import tarfile
from pathlib import Path
from urllib.parse import urlparse

log = logging.getLogger(__name__)


class CheckoutError(RuntimeError):
    """git could not produce the commit; the message never contains the token."""


class Checkout:
    def __init__(self, mirrors_dir: Path) -> None:
        self.mirrors_dir = mirrors_dir

    def fetch(self, clone_url: str, sha: str, *, key: str, token: str | None = None) -> Path:
        """Make `sha` present in the mirror for `key` (one per repository); returns the mirror."""
        mirror = self.mirrors_dir / f"{key}.git"
        self.mirrors_dir.mkdir(parents=True, exist_ok=True)
        # Two jobs of one repository fetch into its mirror at once (a head and its base, two suites): git's own
        # shallow.lock would fail the second ("File exists"), an infrastructure error; so one fetch at a time.
        with open(self.mirrors_dir / f".{key}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            _remove_stale_locks(mirror)
            if not (mirror / "HEAD").exists():
                mirror.mkdir(parents=True, exist_ok=True)
                _git(["init", "--bare", "-q", str(mirror)], token=None)
            if _has_commit(mirror, sha):
                return mirror
            # Fetching one sha by name needs uploadpack.allowAnySHA1InWant on the serving side; GitHub
            # allows it, and for local file:// remotes git passes our -c setting to upload-pack.
            # gc.autoDetach=false: a `gc --auto` the fetch starts runs inside the flock, not on after it in the
            # background holding packed-refs.lock while the next fetch clears the locks it finds.
            _git(
                ["-c", "uploadpack.allowAnySHA1InWant=true", "-c", "gc.autoDetach=false", "--git-dir", str(mirror),
                 "fetch", "-q", "--no-tags", "--depth=1", clone_url, sha],
                token=token, url=clone_url,
            )
        return mirror

    def read_file(self, mirror: Path, sha: str, path: str) -> str | None:
        proc = subprocess.run(
            ["git", "--git-dir", str(mirror), "show", f"{sha}:{path}"], capture_output=True, check=False,
        )
        return proc.stdout.decode("utf-8", errors="replace") if proc.returncode == 0 else None

    def changed_paths(self, mirror: Path, base: str, head: str) -> list[str]:
        """The paths whose content differs between two commits (added, deleted, changed; a rename as both names).
        Trees are compared directly, so the shallow fetches of both commits are enough."""
        proc = subprocess.run(
            ["git", "--git-dir", str(mirror), "diff-tree", "-r", "--name-only", "--no-renames", "-z", base, head],
            capture_output=True, check=False,
        )
        if proc.returncode != 0:
            raise CheckoutError(f"git diff-tree failed: {proc.stderr.decode(errors='replace').strip()}")
        return [p.decode(errors="replace") for p in proc.stdout.split(b"\0") if p]

    def export(self, mirror: Path, sha: str, dest: Path) -> Path:
        """Write the tree of `sha` into `dest` (no .git: the job never sees remotes or credentials)."""
        dest.mkdir(parents=True, exist_ok=True)
        archive = dest.parent / f".{dest.name}.tar"
        with open(archive, "wb") as out:
            proc = subprocess.run(
                ["git", "--git-dir", str(mirror), "archive", "--format=tar", sha],
                stdout=out, stderr=subprocess.PIPE, check=False,
            )
        if proc.returncode != 0:
            raise CheckoutError(f"git archive {sha} failed: {proc.stderr.decode(errors='replace').strip()}")
        with tarfile.open(archive) as tar:
            _extract_safely(tar, dest)
        archive.unlink()
        return dest


def _remove_stale_locks(mirror: Path) -> None:
    """git's lock files (shallow.lock, packed-refs.lock, a ref's .lock, ...) a git process killed mid-fetch left:
    each makes every later fetch fail with "File exists". Called under the mirror's flock, where every git that
    writes this mirror runs, so no live process holds one."""
    if not mirror.is_dir():
        return
    for stale in (*mirror.glob("*.lock"), *(mirror / "refs").rglob("*.lock")):
        if stale.is_file():
            log.warning("removing %s: a git process that died mid-fetch left it", stale)
            stale.unlink(missing_ok=True)


def _has_commit(mirror: Path, sha: str) -> bool:
    proc = subprocess.run(
        ["git", "--git-dir", str(mirror), "cat-file", "-e", f"{sha}^{{commit}}"], capture_output=True, check=False
    )
    return proc.returncode == 0


def _git(args: list[str], *, token: str | None, url: str = "") -> None:
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0")
    if token:
        # Through the environment, not argv or the URL: argv shows in `ps`, URLs end up in logs.
        host = urlparse(url)
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        env.update({
            "GIT_CONFIG_COUNT": "1",
            "GIT_CONFIG_KEY_0": f"http.{host.scheme}://{host.netloc}/.extraheader",
            "GIT_CONFIG_VALUE_0": f"AUTHORIZATION: basic {basic}",
        })
    proc = subprocess.run(["git", *args], capture_output=True, env=env, check=False)
    if proc.returncode != 0:
        message = proc.stderr.decode(errors="replace").strip()
        if token:
            message = message.replace(token, "***")
        raise CheckoutError(f"git {args[-3] if len(args) > 2 else args[0]} failed: {message}")


def _extract_safely(tar: tarfile.TarFile, dest: Path) -> None:
    """tarfile's "data" filter where this Python has it (3.11.4+); Debian 12's 3.11.2 (the runner and service
    images' base) has not, so there every member must stay inside `dest` and no link may point out of it."""
    if hasattr(tarfile, "data_filter"):
        tar.extractall(dest, filter="data")
        return
    root = dest.resolve()
    for member in tar.getmembers():
        target = (root / member.name).resolve()
        link = (target.parent / member.linkname).resolve() if member.issym() else root / member.linkname
        if not (target.is_relative_to(root) and (not (member.issym() or member.islnk()) or link.is_relative_to(root))):
            raise CheckoutError(f"refusing archive member {member.name!r}: it points outside the checkout")
        if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
            raise CheckoutError(f"refusing archive member {member.name!r}: not a file, directory or link")
    tar.extractall(dest)  # noqa: S202 - every member was checked above
