"""Each test of a head job against the same test of its base: what a maintainer should make of its outcome."""

from __future__ import annotations

from enum import StrEnum

FAILING = ("failed", "error")
PASSING = ("passed", "xpassed")


class Verdict(StrEnum):
    NEW_FAILURE = "new_failure"  # fails at head, passes at base: red
    FAILING_AT_BASE = "failing_at_base"  # fails at head and at base: shown (warning), not red
    FIXED = "fixed"  # passes at head, failed at base
    FLAKY = "flaky"  # failed, then passed when re-run in the same job: shown (notice), not red
    KNOWN_FLAKY = "known_flaky"  # fails here, but known flaky across the repository's runs: a warning, not red
    SKIPPED = "skipped"
    UNCHANGED = "unchanged"
    FAILED = "failed"  # fails at head, no base result to compare with: red, as without a base
    PASSED = "passed"  # passes at head, no base result to compare with
    NOT_AFFECTED = "not_affected"  # not run: the pull request cannot affect it; its outcome is the base's


RED = (Verdict.NEW_FAILURE, Verdict.FAILED)


def classify(head_outcome: str, head_reruns: tuple[str, ...], base_outcome: str | None) -> Verdict:
    """`base_outcome` None: the base has no result for this test (a new test, or no usable base at all)."""
    if head_outcome in FAILING:
        if base_outcome in FAILING:
            return Verdict.FAILING_AT_BASE
        return Verdict.NEW_FAILURE if base_outcome in PASSING else Verdict.FAILED
    if head_outcome == "skipped":
        return Verdict.SKIPPED
    if head_outcome in PASSING and any(r in FAILING for r in head_reruns):
        return Verdict.FLAKY
    if base_outcome in FAILING and head_outcome in PASSING:
        return Verdict.FIXED
    return Verdict.PASSED if base_outcome is None else Verdict.UNCHANGED
