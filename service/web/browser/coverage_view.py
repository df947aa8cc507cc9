"""The job page's op-family coverage: `coverage.json` (written in the job by `suites/coverage.py`) read with a size
cap, every field checked for type, every name escaped; a file that is missing, too big or malformed shows nothing
rather than breaking the page (the job ran the pull request's code, so the file is untrusted)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from markupsafe import Markup, escape

from runners.untrusted_files import read_json_data

FILE_NAME = "coverage.json"
MAX_BYTES = 2 * 1024 * 1024
MAX_NAMES = 2000
MAX_DENOMINATOR = 10**6  # op families; a job's larger figure is not a count worth a page
_FAMILY = re.compile(r"[A-Za-z0-9_.]{1,120}")


def _names(value: Any) -> list[str]:
    if not isinstance(value, list):
        return []
    return [name for name in value[:MAX_NAMES] if isinstance(name, str) and _FAMILY.fullmatch(name)]


def read_coverage(attempt_dir: Path) -> dict[str, Any] | None:
    """The validated figures of an attempt's coverage.json, or None when there is none worth showing."""
    try:
        loaded = read_json_data(attempt_dir, FILE_NAME, MAX_BYTES)
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(loaded, dict):
        return None
    denominator, cache_hits = loaded.get("denominator"), loaded.get("cache_hits", 0)
    if not isinstance(denominator, int) or isinstance(denominator, bool) or not 0 < denominator <= MAX_DENOMINATOR:
        return None
    covered = sorted(set(_names(loaded.get("covered"))))
    return {
        "covered": covered,
        "uncovered": sorted(set(_names(loaded.get("uncovered")))),
        "denominator": denominator,
        "percent": round(100.0 * min(len(covered), denominator) / denominator, 1),
        "cache_hits": cache_hits if isinstance(cache_hits, int) and not isinstance(cache_hits, bool) else 0,
        "torch": str(loaded.get("torch", ""))[:40],
        "device": str(loaded.get("device", ""))[:10],
    }


def render_coverage(attempt_dir: Path, job_base: str) -> Markup:
    """The coverage section of the job page (``job_base``: the attempt's URL prefix), or nothing."""
    figures = read_coverage(attempt_dir)
    if figures is None:
        return Markup("")
    covered, uncovered = figures["covered"], figures["uncovered"]
    note = ""
    if figures["cache_hits"]:
        note = (f" {figures['cache_hits']} graphs came whole from the compile cache, so their families are not "
                "counted here: a run with a cold cache gives the full figure.")
    summary = (f"{len(covered)} of {figures['denominator']} op families ({figures['percent']} %) compiled on "
               f"{figures['device']} with torch {figures['torch']}.{note}")
    return Markup(
        '<h2 id="coverage">Op-family coverage</h2>\n<p id="coverage-summary">{summary} '
        '<a href="{href}">coverage.json</a></p>\n'
        '<details id="coverage-families"><summary>covered ({n_cov}) and not covered ({n_unc})</summary>'
        '<p><b>covered:</b> <code>{cov}</code></p><p><b>not covered:</b> <code>{unc}</code></p></details>\n'
    ).format(summary=escape(summary), href=f"{job_base}/files/{FILE_NAME}", n_cov=len(covered), n_unc=len(uncovered),
             cov=" ".join(covered), unc=" ".join(uncovered))
