"""Getting a developer's clone ready for `compile-ci repro`: at the job's commit (checked out, or verified), and
the job's exact requirements (the wheels its environment was unpacked from, checked by sha256) in a private
directory, never in the developer's own environment."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

GIT_TIMEOUT_S = 300
DOWNLOAD_TIMEOUT_S = 120


class ReproError(Exception):
    """A problem the developer can fix: said in a sentence, never a traceback."""


def _git(clone: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["git", "-C", str(clone), *args], capture_output=True, text=True,
                              timeout=GIT_TIMEOUT_S, check=False)
    except FileNotFoundError:
        raise ReproError("git is not installed: the clone's commit cannot be checked") from None
    except subprocess.TimeoutExpired:
        raise ReproError(f"git {args[0]} did not finish within {GIT_TIMEOUT_S} s") from None


def at_commit(clone: Path, sha: str, pull_request: int | None, checkout: bool) -> str:
    """Puts (or, with checkout False, finds) the clone at `sha`; returns what was done, for the developer."""
    head = _git(clone, "rev-parse", "--verify", "HEAD")
    if head.returncode != 0:
        raise ReproError(f"{clone} is not a git clone of the repository ({head.stderr.strip() or 'no HEAD'}); clone "
                         "it and run compile-ci repro there, or pass --any-commit to run against these files as "
                         "they are")
    changed = _git(clone, "status", "--porcelain", "--untracked-files=no").stdout.rstrip()
    if head.stdout.strip() == sha:
        if changed:
            files = changed.splitlines()
            named = ", ".join(line[3:] for line in files[:3]) + (", …" if len(files) > 3 else "")
            return (f"WARNING: the clone is at the job's commit {sha[:12]} but has uncommitted changes "
                    f"({len(files)} files: {named}): the repro runs your edited files, not the job's; `git stash` "
                    "first to run exactly what the job ran")
        return f"the clone is at the job's commit {sha[:12]}"
    if not checkout:
        raise ReproError(f"the clone is at {head.stdout.strip()[:12]}, the job ran {sha[:12]}: `git checkout "
                         f"{sha}` (or leave out --no-checkout and compile-ci repro does it)")
    if changed:
        raise ReproError(f"the clone has uncommitted changes ({len(changed.splitlines())} files), and the job ran "
                         f"{sha[:12]}: commit or stash them first (or check out {sha[:12]} yourself)")
    if _git(clone, "cat-file", "-e", f"{sha}^{{commit}}").returncode != 0:
        # A pull request's head is often in no branch of a fresh clone: ask for the commit, then the PR's ref.
        refs = [sha, *([f"refs/pull/{pull_request}/head"] if pull_request else [])]
        for ref in refs:
            if _git(clone, "fetch", "--quiet", "origin", ref).returncode == 0 and _git(
                    clone, "cat-file", "-e", f"{sha}^{{commit}}").returncode == 0:
                break
        else:
            raise ReproError(f"commit {sha} is not in the clone and `git fetch origin` did not bring it: fetch it "
                             "yourself (the pull request's branch), then run compile-ci repro again")
    moved = _git(clone, "checkout", "--quiet", "--detach", sha)
    if moved.returncode != 0:
        raise ReproError(f"git checkout {sha[:12]} failed: {moved.stderr.strip()}")
    return f"checked out the job's commit {sha[:12]} (was {head.stdout.strip()[:12]}; `git switch -` goes back)"


def download(url: str, timeout: float = DOWNLOAD_TIMEOUT_S) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return bytes(response.read())
    except urllib.error.HTTPError as exc:
        hint = " (a private repository's pages need a signed-in browser)" if exc.code in (302, 401, 403, 404) else ""
        raise ReproError(f"{url}: HTTP {exc.code}{hint}") from None
    except (OSError, ValueError) as exc:
        raise ReproError(f"cannot reach {url}: {getattr(exc, 'reason', exc)}") from None


def install_wheels(base: str, wheels: list[dict[str, Any]], work: Path) -> Path | None:
    """The job's wheels, downloaded from the service and checked, unpacked into a site directory of their own
    (kept: a second repro of the same job installs nothing). None when the job had no requirements."""
    if not wheels:
        return None
    for wheel in wheels:
        missing = [k for k in ("name", "url", "sha256") if not isinstance(wheel, dict) or not
                   isinstance(wheel.get(k), str) or not wheel[k]]
        if missing:
            raise ReproError(f"the job's list of wheels has an entry without its {', '.join(missing)} "
                             f"({str(wheel)[:200]}): the service sent a malformed repro.json; nothing installed")
    key = hashlib.sha256(json.dumps(sorted(w["sha256"] for w in wheels)).encode()).hexdigest()[:16]
    site = work / f"site-{key}"
    if (site / ".compile-ci-ready").exists():
        return site
    folder = work / "wheels"
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for wheel in wheels:
        name = Path(str(wheel["name"])).name
        data = download(base + str(wheel["url"]))
        if hashlib.sha256(data).hexdigest() != wheel["sha256"]:
            raise ReproError(f"{name}: the download's sha256 is not the one the job used; not installed")
        (folder / name).write_bytes(data)
        files.append(str(folder / name))
    # The developer's interpreter and platform: a wheel built for another one is pip's complaint, said as is.
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--no-compile",
                           "--disable-pip-version-check", "--target", str(site), *files],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("ERROR")]
        raise ReproError("pip could not install the job's wheels here (this Python is "
                         f"{sys.version_info.major}.{sys.version_info.minor}): "
                         + ("\n".join(lines[:5]) or proc.stderr.strip()[-1000:]))
    (site / ".compile-ci-ready").write_text("\n".join(files) + "\n")
    return site
