"""A job whose every test would be reused, concluded from its source without starting a runner.

When the change since the job's source touches documentation only (or nothing: a base run at its push's commit),
the job would import the same bytes as its source, collect the same tests and leave every one of them to it; a
runner would only pay a process start, torch's import, the repository's install and a collection to learn that
(about 5 s a suite on the GPU host, more with an install). So when all of this holds, the job takes every test of
its source as reused and no runner starts:

- the planner left groups to a source job (service/planning/reuse_plan.py), and the changed paths were read;
- every changed path is documentation (affected.only_documentation: not Python, not config, not an install file);
- the source has ended with test results, and every one of its tests belongs to a group the change leaves (a test
  of no recorded group, or one the source still waits for, is not known to be the same);
- the job's recorded inputs are the source's: suite code, runner build, device, torch, the shared config and every
  group's key (so the same declared targets, with the same import closures);
- the source's run-time compiler fingerprint is known: it is this job's too, since nothing it imports changed.

Anything else starts the runner as before, whose collection and fingerprint are checked at run time. The results are
then taken and reported exactly as for a job whose runner left every test to its source (reuse_check.py), so the
verdict does not depend on which path ran.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from service.planning.affected import only_documentation
from service.store import Job, Store
from service.store.reuse import inputs_of
from service.store.shards import NOT_RUN

RESULTS = ("success", "failure")
MAX_TESTS = 200_000  # junit's own cap (service/jobs/junit.py)


@dataclass(frozen=True)
class Whole:
    """What a job concluded without a runner takes: its source job, the source's tests in order, its fingerprint."""

    source: str
    nodeids: tuple[str, ...]
    fingerprint: str
    torch_version: str = ""  # the source's: the same runner build, so the torch this job would have imported

    def line(self) -> str:
        return (f"compile-ci: only documentation changed since job {self.source}, and every one of its "
                f"{len(self.nodeids)} tests ended under the same inputs: their results are this job's, so no "
                f"runner was started.\n")


def groups_of(metrics: object) -> frozenset[str]:
    """The groups a result's job said the test belongs to (the plugin's `targets` metric); empty when it said none."""
    said = metrics.get("targets") if isinstance(metrics, dict) else None
    return frozenset(g for g in said if isinstance(g, str)) if isinstance(said, list) else frozenset()


def reused_whole(store: Store, job: Job, source_id: str, left: Collection[str],
                 changed: Sequence[str] | None) -> Whole | None:
    """The source to take every test from without a runner, or None: start the runner (the module's docstring)."""
    if not source_id or not left or changed is None or not only_documentation(changed):
        return None
    source = store.get_job(source_id)
    if source is None or source.state != "completed" or source.conclusion not in RESULTS:
        return None
    mine, theirs = inputs_of(store, job.id, job.attempt), inputs_of(store, source.id, source.attempt)
    if mine is None or theirs is None or theirs.fingerprint is None:
        return None
    if ((mine.suites, mine.build, mine.device, mine.torch, mine.config, mine.keys or {})
            != (theirs.suites, theirs.build, theirs.device, theirs.torch, theirs.config, theirs.keys or {})):
        return None
    rows = store.results_of(source.id, source.attempt)
    if not rows or len(rows) > MAX_TESTS:
        return None
    groups = set(left)
    for row in rows:
        said = groups_of(row.metrics)
        if not said or not said <= groups or row.outcome == NOT_RUN:
            return None
    return Whole(source.id, tuple(row.nodeid for row in rows), theirs.fingerprint, source.torch_version or "")
