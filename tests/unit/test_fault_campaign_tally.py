"""The fault campaign counts a job as lost when GitHub never showed its check run: internal runs (a base run, the
daily canary) have none by design, so their jobs must not be counted at all."""

from __future__ import annotations

from pathlib import Path

from bench.fault_campaign import reportable_jobs
from service.jobs import lifecycle
from service.store import NewRun, Store
from service.store.rows import CANARY_TRIGGER


def _planned_run(store: Store, trigger: str, sha: str) -> str:
    run, _ = store.create_run_if_absent(NewRun(
        repo_full_name="octo/zoo", repo_id=1, installation_id=2, clone_url="file:///x", private=False,
        trigger=trigger, trigger_ref=f"{trigger}/{sha}", pr_number=1 if trigger == "pull_request" else None,
        branch="main", head_sha=sha * 40, sender="o"))
    lifecycle.plan(store, run, [lifecycle.new_job(run, "correctness", "cpu", 60)], None)
    return run.id


def test_only_jobs_with_a_check_run_are_reportable(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'ci.db'}")
    head = _planned_run(store, "pull_request", "a")
    _planned_run(store, "base", "b")
    _planned_run(store, CANARY_TRIGGER, "c")
    assert [job.run_id for job in reportable_jobs(store)] == [head]
