"""`compile-ci repro <job page URL or job id> [test]`: fetch a failing test's repro.py from the service's job page
and run it against a local clone of the repository, so the failure shows on the developer's machine."""

from __future__ import annotations

import html
import re
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote, urlsplit

_JOB_ID = re.compile(r"[A-Za-z0-9_.:@+-]+")
TIMEOUT_S = 60


class ReproError(Exception):
    pass


def job_location(target: str, base_url: str) -> tuple[str, str]:
    """(service base URL, job id) from a job page URL (any page under it) or a bare job id."""
    if "://" in target:
        parts = urlsplit(target)
        match = re.match(r"/jobs/([^/?#]+)", parts.path)
        if match is None:
            raise ReproError(f"{target} is not a job page (expected .../jobs/<job id>)")
        return f"{parts.scheme}://{parts.netloc}", match.group(1)
    if not _JOB_ID.fullmatch(target):
        raise ReproError(f"{target!r} is neither a job page URL nor a job id")
    if not base_url:
        raise ReproError("a bare job id needs the service's address: --url or COMPILE_CI_PUBLIC_URL")
    return base_url.rstrip("/"), target


def _get(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            return response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        raise ReproError(f"{url}: HTTP {exc.code} (a private repository's pages need a signed-in browser)") from exc
    except OSError as exc:
        raise ReproError(f"{url}: {exc}") from exc


def tests_with_repro(page: str, job_id: str) -> list[str]:
    """The test folders the job page links with a repro (failed tests)."""
    link = re.compile(rf'href="/jobs/{re.escape(job_id)}/tests/([^"/]+)">[^<]*repro</a>')
    return list(dict.fromkeys(html.unescape(name) for name in link.findall(page)))


def run_repro(target: str, test: str | None, clone: Path, base_url: str = "") -> int:
    base, job_id = job_location(target, base_url)
    names = tests_with_repro(_get(f"{base}/jobs/{quote(job_id)}"), job_id)
    chosen = [n for n in names if test is None or test in n]
    if not chosen:
        listed = "\n  ".join(names) or "(none: no test of this job failed)"
        raise ReproError(f"no failed test matching {test!r} in job {job_id}; tests with a repro:\n  {listed}")
    if len(chosen) > 1 and test is not None and test not in chosen:
        raise ReproError(f"{test!r} matches several tests; name one of:\n  " + "\n  ".join(chosen))
    name = test if test in chosen else chosen[0]
    script = _get(f"{base}/jobs/{quote(job_id)}/files/tests/{quote(name)}/repro.py")
    print(f"compile-ci repro: {name} from job {job_id}, against {clone.resolve()}", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "repro.py"
        path.write_text(script)
        return subprocess.call([sys.executable, str(path), str(clone.resolve())], cwd=clone)
