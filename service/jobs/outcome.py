"""Judging a finished attempt: the runner's result and the job's junit.xml into test records and an Outcome.

Everything read here is the job's own output, copied out by the runner (runners/outbox.py) into a directory the job
never had, and still untrusted: read bounded, parsed defensively; a file that cannot be parsed is the job's failure
("Invalid output"), never a crash of the judging that would read as an infrastructure error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

from runners.outbox import OutputReport
from runners.protocol import RunResult
from runners.untrusted_files import MAX_NUMBER, read_bounded, read_json_data
from service.github.annotations import declared_target, locate_in_checkout
from service.github.checks import count_outcomes, summary_line
from service.github.markdown import code_block, code_span
from service.jobs.junit import JUnitError, parse_junit
from service.jobs.lifecycle import INFRA_TITLE, Conclusion, Outcome
from service.store import TestRecord
from suites.naming import sanitise_nodeid

PARTIAL_OUTCOMES = ("passed", "failed", "skipped", "xfailed", "xpassed")


@dataclass
class Attempt:
    """What one attempt left behind, read from its output directory."""

    records: list[TestRecord] = field(default_factory=list)
    junit_problem: str | None = None
    environment: dict[str, object] = field(default_factory=dict)
    output: OutputReport = field(default_factory=OutputReport)  # what the runner copied out, and what it refused

    @property
    def counts(self) -> dict[str, int]:
        return count_outcomes(r.outcome for r in self.records)


def read_attempt(out: Path, roots: list[str], checkout: Path, output: OutputReport | None = None) -> Attempt:
    """The junit records (with their compile metrics and where a failure sits in the repository's own files)."""
    attempt = Attempt(output=output or OutputReport())
    attempt.environment = _environment(out, attempt.output)
    refused = {name for name, _reason in attempt.output.problems}
    if "junit.xml" in refused:
        attempt.junit_problem = "junit.xml was not a regular file, so it was not read"
        records: list[TestRecord] = []
    elif (out / "junit.xml").exists():
        try:
            records = parse_junit(read_bounded(out, "junit.xml", MAX_JUNIT_BYTES))
        except (JUnitError, OSError) as exc:
            attempt.junit_problem = str(exc)
            records = []
    else:
        # pytest writes junit.xml at the very end: a job killed for its memory, its time or a crash leaves none,
        # but the plugin wrote each finished test's metrics.json as it went.
        records = partial_records(out)
    attempt.records = [_with_metrics(_located(r, roots, checkout), out, attempt.output) for r in records]
    return attempt


# What the suites' plugin records of the job's environment (suites/plugin.py): only these keys, as short strings.
ENVIRONMENT_KEYS = ("torch_version", "python_version", "device", "device_name", "cuda_version",
                    "cuda_visible_devices", "device_uuid")


def _short_text(value: object) -> bool:
    return value is None or isinstance(value, str) and len(value) <= 120 and value.isprintable()


def _environment(out: Path, output: OutputReport) -> dict[str, object]:
    """environment.json, kept only as known keys with short printable values (they reach the check run)."""
    if not (out / "environment.json").exists():
        return {}
    data = read_json(out / "environment.json")
    kept = {key: data[key] for key in ENVIRONMENT_KEYS if key in data and _short_text(data[key])}
    if not data or len(kept) != len([k for k in data if k in ENVIRONMENT_KEYS]):
        output.refuse("environment.json", "not the JSON object of short strings the suites write")
    return kept


def partial_records(out: Path) -> list[TestRecord]:
    """The tests that finished before the job died. The job wrote these files: only well-formed fields are kept."""
    records = []
    for path in sorted((out / "tests").glob("*/metrics.json")):
        data = read_json(path)
        nodeid, outcome, duration = data.get("nodeid"), data.get("outcome"), data.get("duration_s", 0.0)
        if not isinstance(nodeid, str) or outcome not in PARTIAL_OUTCOMES or len(nodeid) > 2000:
            continue
        seconds = float(duration) if isinstance(duration, int | float) and duration >= 0 else 0.0
        records.append(TestRecord(nodeid=nodeid, outcome=str(outcome), duration_s=seconds,
                                  message="(from the test's own record: the job ended before its junit.xml)"
                                  if outcome == "failed" else ""))
    return records


def judge(result: RunResult, attempt: Attempt, cancel_reason: str = "", output_mb: int = 0) -> Outcome:
    """The outcomes a maintainer must be able to tell apart."""
    counts = attempt.counts
    torch = str(attempt.environment.get("torch_version", ""))

    def outcome(conclusion: Conclusion, title: str, detail: str = "") -> Outcome:
        return Outcome(conclusion, title, detail, counts, torch)

    failed = counts["failed"] + counts["errors"]
    if result.infra_error:  # may quote the job (its log's first line): code, never Markdown
        return outcome(Conclusion.FAILURE, INFRA_TITLE, code_block(result.infra_error, limit=4000))
    if result.cancelled:
        return outcome(Conclusion.CANCELLED, "Cancelled", cancel_reason or "The job was cancelled before it finished.")
    if result.timed_out:
        limit = f"Killed at the job's time limit after {result.duration_s:.0f} s.{_before(counts)}"
        return outcome(Conclusion.TIMED_OUT, "Timed out", limit)
    if result.oom:
        return outcome(Conclusion.FAILURE, "Out of memory",
                       f"The job was killed for exceeding its memory limit.{_before(counts)}")
    if result.cache_over_cap:
        return outcome(Conclusion.FAILURE, "Compile cache over its cap",
                       "The job wrote more into its own compile-cache layer than the repository's cache may hold "
                       "(COMPILE_CI_CACHE_CAP_MB), so it was stopped; the layer went with it and nothing else was "
                       f"affected.{_before(counts)}")
    if attempt.output.over_quota:
        size = f"{output_mb} MB" if output_mb else "its quota"
        return outcome(Conclusion.FAILURE, f"Output over {size}",
                       f"The job wrote more than {size} (or too many files) to its output directory; writes past "
                       f"that failed inside the job, and nothing else was affected. What fitted is on the job page."
                       f"{_before(counts)}")
    if attempt.output.problem_count:
        n = attempt.output.problem_count
        return outcome(Conclusion.FAILURE, "Invalid output",
                       f"The job left {n} invalid artifact{'s' if n != 1 else ''} in its output directory (a link, "
                       f"FIFO, socket or device, a name or file the service cannot take, or a file of the suites' "
                       f"that it could not parse). None was opened; the job page lists them.{_before(counts)}")
    if result.exit_code == 5:
        return outcome(Conclusion.NEUTRAL, "No tests ran", "pytest collected no tests.")
    if result.exit_code in (0, 1) and attempt.junit_problem is not None:
        return outcome(Conclusion.FAILURE, "Invalid junit.xml",
                       f"pytest ended, but its junit.xml could not be read: "
                       f"{code_span(attempt.junit_problem, limit=500)}.{_before(counts)}")
    if result.exit_code in (0, 1):
        if result.exit_code == 0 and failed == 0:
            return outcome(Conclusion.SUCCESS, summary_line(counts))
        return outcome(Conclusion.FAILURE, summary_line(counts))
    detail = code_span(attempt.junit_problem, limit=500) if attempt.junit_problem else "see the log"
    return outcome(Conclusion.FAILURE, f"pytest exited with code {result.exit_code}",
                   f"The test run did not complete: {detail}.{_before(counts)}")


def _before(counts: dict[str, int]) -> str:
    finished = sum(counts.values())
    if not finished:
        return ""
    return f" {finished} test(s) finished before it: {summary_line(counts)}."


def write_meta(out: Path, result: RunResult, runner: str, outcome: Outcome, attempt: Attempt) -> None:
    """The worker's record of the attempt (the job's own keys cannot override the worker's)."""
    report = attempt.output
    meta = {**attempt.environment, "exit_code": result.exit_code, "duration_s": round(result.duration_s, 3),
            "runner": runner, "timed_out": result.timed_out, "oom": result.oom, "infra_error": result.infra_error,
            "conclusion": outcome.conclusion.value,
            "output": {"files": report.files, "bytes": report.bytes, "over_quota": report.over_quota,
                       "problem_count": report.problem_count,
                       "problems": [{"name": name, "reason": reason} for name, reason in report.problems]}}
    (out / "meta.json").write_text(json.dumps(meta, indent=2))


def _with_metrics(record: TestRecord, out: Path, output: OutputReport) -> TestRecord:
    """The suite plugin's compile metrics of this test, kept in the store so pages need not read thousands of files."""
    path = out / "tests" / sanitise_nodeid(record.nodeid) / "metrics.json"
    loaded = read_json(path)
    if not loaded and path.exists():  # the plugin writes it whole before the job ends: this one was tampered with
        output.refuse(str(path.relative_to(out)), "not a JSON object the suites write, or over 256 KB")
    metrics = bounded_metrics(loaded)
    if not metrics:
        return record
    # JUnit cannot tell an unexpected pass from a pass; the plugin's record can (only that relabelling is taken).
    outcome = "xpassed" if record.outcome == "passed" and metrics.get("outcome") == "xpassed" else record.outcome
    return replace(record, metrics=metrics, outcome=outcome)


def _located(record: TestRecord, roots: list[str], checkout: Path) -> TestRecord:
    if record.outcome not in ("failed", "error"):
        return replace(record, repo_path="")

    def exists(rel: str) -> bool:
        return (checkout / rel).is_file()

    # The declared target's definition first (a pass, a model class), else the deepest frame in the checkout.
    where = declared_target(record.repo_path, exists) or locate_in_checkout(
        record.details, [r for r in roots if r], exists)
    return replace(record, repo_path=where[0] if where else "", repo_line=where[1] if where else None)


# The job writes these files: what the store keeps of one test's metrics is bounded whatever the plugin wrote.
MAX_JSON_BYTES = 256 * 1024
MAX_METRICS, MAX_KEY, MAX_TEXT, MAX_ITEMS, MAX_ITEM = 64, 100, 2000, 20, 400


def bounded_metrics(data: dict[str, object]) -> dict[str, object]:
    """Numbers, short strings and short lists of strings (the ledger's reasons); anything else is dropped."""
    kept: dict[str, object] = {}
    for key, value in data.items():
        if len(kept) >= MAX_METRICS or not isinstance(key, str) or len(key) > MAX_KEY:
            continue
        if isinstance(value, bool) or value is None:
            kept[key] = value
        elif isinstance(value, int | float):  # read_json_data bounds them; a stored row may be older
            if -MAX_NUMBER <= value <= MAX_NUMBER:  # false for NaN and the infinities too
                kept[key] = value
        elif isinstance(value, str):
            kept[key] = value[:MAX_TEXT]
        elif isinstance(value, list):
            kept[key] = [item[:MAX_ITEM] for item in value[:MAX_ITEMS] if isinstance(item, str)]
    return kept


MAX_JUNIT_BYTES = 64 * 1024 * 1024


def read_json(path: Path) -> dict[str, object]:
    """A small JSON object the job wrote; {} when it is missing, too big, not JSON or not an object."""
    try:
        data = read_json_data(path.parent, path.name, MAX_JSON_BYTES)
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}
