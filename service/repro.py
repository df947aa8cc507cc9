"""`compile-ci repro <job or test page URL, or a job id> [test]`: a failed test of a job, rerun on the developer's
machine from a clone of the repository: the clone put at the job's commit, the job's own wheels installed beside it
(never into the developer's environment), the job's repro.py fetched, one command printed, then run."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from service.repro_setup import ReproError, at_commit, download, install_wheels

__all__ = ["ReproError", "job_location", "run_repro"]

_JOB_ID = re.compile(r"[A-Za-z0-9_.:@+-]+")
_TEST_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,199}")  # the service's sanitised test folder names
_PAGE = re.compile(r"/jobs/(?P<job>[^/?#]+)(?:/attempts/(?P<attempt>[0-9]{1,6}))?(?:/tests/(?P<test>[^/?#]+))?")
INFO_TIMEOUT_S = 60


@dataclass(frozen=True)
class Target:
    base: str  # the service's address
    job: str
    attempt: int | None  # None: the newest
    test: str | None  # from a test page's URL

    @property
    def info_url(self) -> str:
        attempt = f"/attempts/{self.attempt}" if self.attempt else ""
        return f"{self.base}/jobs/{quote(self.job)}{attempt}/repro.json"


def job_location(target: str, base_url: str) -> Target:
    """The job (and attempt, and test) a page URL or a bare job id names."""
    if "://" in target:
        parts = urlsplit(target)
        match = _PAGE.match(parts.path)
        if match is None or not parts.netloc:
            raise ReproError(f"{target} is not a job or test page (expected …/jobs/<job id>[/tests/<test>])")
        attempt = int(match["attempt"]) if match["attempt"] else None
        return Target(f"{parts.scheme}://{parts.netloc}", match["job"], attempt, match["test"])
    if not _JOB_ID.fullmatch(target):
        raise ReproError(f"{target!r} is neither a job page URL nor a job id")
    if not base_url:
        raise ReproError("a bare job id needs the service's address: --url or COMPILE_CI_PUBLIC_URL")
    if "://" not in base_url:
        raise ReproError(f"--url {base_url!r} is not an address (expected http(s)://host[:port])")
    return Target(base_url.rstrip("/"), target, None, None)


def _info(where: Target) -> dict[str, Any]:
    try:
        info = json.loads(download(where.info_url, INFO_TIMEOUT_S))
    except ValueError:
        raise ReproError(f"{where.info_url} did not answer with a job's description: is {where.base} a "
                         "compile-ci service?") from None
    if not isinstance(info, dict) or not isinstance(info.get("head_sha"), str):
        raise ReproError(f"{where.info_url}: not a job's description")
    return info


def _chosen(info: dict[str, Any], wanted: str | None) -> dict[str, Any]:
    # Names become a folder here and the repro's path a URL on the service: only the shapes the service makes.
    tests = [t for t in info.get("tests") or [] if isinstance(t, dict) and isinstance(t.get("name"), str)
             and _TEST_NAME.fullmatch(t["name"]) and str(t.get("repro", "")).startswith("/jobs/")]
    matching = [t for t in tests if wanted is None or wanted in t["name"] or wanted in str(t.get("nodeid"))]
    exact = [t for t in matching if wanted in (t["name"], t.get("nodeid"))]
    if exact or len(matching) == 1 or (matching and wanted is None):
        return (exact or matching)[0]
    listed = "\n  ".join(str(t.get("nodeid") or t["name"]) for t in tests) or "(none: no test of this job failed)"
    if not matching:
        raise ReproError(f"no failed test matching {wanted!r} in job {info.get('job')}; tests with a repro:\n"
                         f"  {listed}")
    raise ReproError(f"{wanted!r} matches several failed tests; name one of:\n  " + "\n  ".join(
        str(t.get("nodeid") or t["name"]) for t in matching))


def _say(text: str) -> None:
    print(f"compile-ci repro: {text}", file=sys.stderr, flush=True)


def _work_dir(job: str, attempt: object) -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "compile-ci" / "repro" / f"{job}-{attempt}"


def _torch_note(job_torch: str) -> str | None:
    try:
        here = metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "torch is not installed here: the repro needs it (the job ran torch " + (job_torch or "?") + ")"
    if job_torch and here.split("+")[0] != job_torch.split("+")[0]:  # "+cpu" / "+cu124": the device says that
        return f"this machine has torch {here}, the job ran {job_torch}: a difference can hide or change the failure"
    return None


def run_repro(target: str, test: str | None, clone: Path, base_url: str = "", *, checkout: bool = True,
              any_commit: bool = False, output_code: bool = False, bisect: bool = False,
              work: Path | None = None) -> int:
    if not clone.exists():
        raise ReproError(f"--clone {clone}: no such directory (the clone of the repository; default: here)")
    if not clone.is_dir():
        raise ReproError(f"--clone {clone}: not a directory")
    clone = clone.resolve()
    where = job_location(target, base_url)
    info = _info(where)
    chosen = _chosen(info, test or where.test)
    sha = info["head_sha"]
    _say(f"{chosen.get('nodeid') or chosen['name']}, job {info.get('job')} (attempt {info.get('attempt')}) of "
         f"{info.get('repository')} at {sha[:12]}")
    if any_commit:
        _say(f"--any-commit: running against the clone's files as they are, not checked against {sha[:12]}")
    else:
        _say(at_commit(clone, sha, info.get("pull_request"), checkout))
    work = work or _work_dir(str(info.get("job")), info.get("attempt"))
    wheels = info.get("wheels")
    site = install_wheels(where.base, wheels or [], work)
    if wheels is None:
        _say("the job kept no list of its wheels (it ran before compile-ci did): its [install] requirements, if "
             "any, must be installed here")
    elif site is not None:
        _say(f"the job's {len(wheels)} wheel(s), sha256 checked, in {site}: "
             + ", ".join(str(w["name"]) for w in wheels))
    script = work / str(chosen["name"]) / "repro.py"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_bytes(download(where.base + str(chosen["repro"])))
    note = _torch_note(str(info.get("torch_version") or ""))
    if note:
        _say(note)
    command, env = _command(script, clone, site, output_code, bisect)
    shown = " ".join([*(f"{k}={shlex.quote(v)}" for k, v in env.items()), *map(shlex.quote, command)])
    _say(f"running it; to run it again (offline, nothing to set up):\n  cd {shlex.quote(str(clone))} && {shown}")
    return subprocess.call(command, cwd=clone, env={**os.environ, **env})


def _command(script: Path, clone: Path, site: Path | None, output_code: bool,
             bisect: bool = False) -> tuple[list[str], dict[str, str]]:
    """The command and the variables it needs beyond the developer's own: the job's wheels first on the path, and
    compile-ci's suites (a built-in suite's test file lives there, and the bisection)."""
    import suites

    paths = [str(site)] if site is not None else []
    paths.append(str(Path(suites.__file__).resolve().parent.parent))
    paths += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in paths]
    env = {"PYTHONPATH": os.pathsep.join(paths)}
    text = script.read_text(errors="replace")
    if not output_code and "--output-code" not in text and "TORCH_LOGS" in text:
        env["TORCH_LOGS"] = ""  # a repro.py from before the opt-in turns the generated code's logging on itself
    if bisect and "--bisect" not in text:  # it would take the flag for the clone's path
        raise ReproError("this job's repro.py was written before compile-ci could bisect: run it again without "
                         "--bisect (or re-run the job)")
    options = [*(["--output-code"] if output_code else []), *(["--bisect"] if bisect else [])]
    return [sys.executable, str(script), str(clone), *options], env
