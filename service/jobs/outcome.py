"""Judging a finished attempt: the runner's result and the job's junit.xml into test records and an Outcome."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

from runners.protocol import RunResult
from service.github.annotations import declared_target, locate_in_checkout
from service.github.checks import count_outcomes, summary_line
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

    @property
    def counts(self) -> dict[str, int]:
        return count_outcomes(r.outcome for r in self.records)


def read_attempt(out: Path, roots: list[str], checkout: Path) -> Attempt:
    """The junit records (with their compile metrics and where a failure sits in the repository's own files)."""
    attempt = Attempt(environment=read_json(out / "environment.json"))
    if (out / "junit.xml").exists():
        try:
            records = parse_junit(out / "junit.xml")
        except JUnitError as exc:
            attempt.junit_problem = str(exc)
            records = []
    else:
        # pytest writes junit.xml at the very end: a job killed for its memory, its time or a crash leaves none,
        # but the plugin wrote each finished test's metrics.json as it went.
        records = partial_records(out)
    attempt.records = [_with_metrics(_located(r, roots, checkout), out) for r in records]
    return attempt


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


def judge(result: RunResult, attempt: Attempt, cancel_reason: str = "") -> Outcome:
    """The outcomes a maintainer must be able to tell apart."""
    counts = attempt.counts
    torch = str(attempt.environment.get("torch_version", ""))

    def outcome(conclusion: Conclusion, title: str, detail: str = "") -> Outcome:
        return Outcome(conclusion, title, detail, counts, torch)

    failed = counts["failed"] + counts["errors"]
    if result.infra_error:
        return outcome(Conclusion.FAILURE, INFRA_TITLE, result.infra_error)
    if result.cancelled:
        return outcome(Conclusion.CANCELLED, "Cancelled", cancel_reason or "The job was cancelled before it finished.")
    if result.timed_out:
        limit = f"Killed at the job's time limit after {result.duration_s:.0f} s.{_before(counts)}"
        return outcome(Conclusion.TIMED_OUT, "Timed out", limit)
    if result.oom:
        return outcome(Conclusion.FAILURE, "Out of memory",
                       f"The job was killed for exceeding its memory limit.{_before(counts)}")
    if result.exit_code == 5:
        return outcome(Conclusion.NEUTRAL, "No tests ran", "pytest collected no tests.")
    if result.exit_code in (0, 1) and attempt.junit_problem is None:
        if result.exit_code == 0 and failed == 0:
            return outcome(Conclusion.SUCCESS, summary_line(counts))
        return outcome(Conclusion.FAILURE, summary_line(counts))
    detail = attempt.junit_problem or "see the log"
    return outcome(Conclusion.FAILURE, f"pytest exited with code {result.exit_code}",
                   f"The test run did not complete: {detail}.{_before(counts)}")


def _before(counts: dict[str, int]) -> str:
    finished = sum(counts.values())
    if not finished:
        return ""
    return f" {finished} test(s) finished before it: {summary_line(counts)}."


def write_meta(out: Path, result: RunResult, runner: str, outcome: Outcome, attempt: Attempt) -> None:
    meta = {"exit_code": result.exit_code, "duration_s": round(result.duration_s, 3), "runner": runner,
            "timed_out": result.timed_out, "oom": result.oom, "infra_error": result.infra_error,
            "conclusion": outcome.conclusion.value, **attempt.environment}
    (out / "meta.json").write_text(json.dumps(meta, indent=2))


def _with_metrics(record: TestRecord, out: Path) -> TestRecord:
    """The suite plugin's compile metrics of this test, kept in the store so pages need not read thousands of files."""
    metrics = bounded_metrics(read_json(out / "tests" / sanitise_nodeid(record.nodeid) / "metrics.json"))
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
        if isinstance(value, bool | int | float) or value is None:
            kept[key] = value
        elif isinstance(value, str):
            kept[key] = value[:MAX_TEXT]
        elif isinstance(value, list):
            kept[key] = [item[:MAX_ITEM] for item in value[:MAX_ITEMS] if isinstance(item, str)]
    return kept


def read_json(path: Path) -> dict[str, object]:
    try:
        if path.stat().st_size > MAX_JSON_BYTES:
            return {}
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
