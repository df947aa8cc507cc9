"""Whose results a job may reuse (service/planning/reuse_plan.py): only a run at least as trusted, of the same
repository; a pull request's own runs are never a source, whatever sha they share with the job."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from service.planning.reuse_plan import may_serve, source_run_of
from service.store import NewRun, Run, Store

BASE, HEAD, BEFORE = "b" * 40, "c" * 40, "a" * 40


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(f"sqlite:///{tmp_path / 'ci.db'}")


_refs = itertools.count()


def run(store: Store, trigger: str, sha: str, repo: str = "octo/zoo", repo_id: int = 1, **extra: object) -> Run:
    made, _ = store.create_run_if_absent(NewRun(
        repo_full_name=repo, repo_id=repo_id, installation_id=2, clone_url="file:///x", private=False,
        trigger=trigger, trigger_ref=f"{trigger}/{next(_refs)}", pr_number=7 if trigger == "pull_request" else None,
        branch="main", head_sha=sha, sender="o", **extra))  # type: ignore[arg-type]
    return made


def test_a_pull_request_takes_its_base_and_nothing_else(store: Store) -> None:
    push = run(store, "push", BASE)
    other_pr = run(store, "pull_request", BASE)  # the same sha as its base: an untrusted job of it
    head = run(store, "pull_request", HEAD, base_sha=BASE)
    store.link_base(head.id, push.id)
    assert source_run_of(store, store.get_run(head.id)).id == push.id  # type: ignore[union-attr]
    store.link_base(head.id, other_pr.id)  # a link no planner makes: refused all the same
    assert source_run_of(store, store.get_run(head.id)) is None  # type: ignore[arg-type]


def test_a_base_run_and_a_push_take_only_pushes_of_their_repository(store: Store) -> None:
    base_run = run(store, "base", BASE)
    run(store, "pull_request", BASE)  # a pull request's run at the very sha: never the base run's source
    assert source_run_of(store, base_run) is None
    run(store, "push", BASE, repo="octo/other", repo_id=9)  # another repository's push at that sha
    assert source_run_of(store, base_run) is None
    push = run(store, "push", BASE)
    assert source_run_of(store, base_run).id == push.id  # type: ignore[union-attr]

    run(store, "pull_request", BEFORE)  # merged fast-forward: a push at a pull request's head
    later = run(store, "push", HEAD, before_sha=BEFORE)
    assert source_run_of(store, later) is None  # the pull request's run is no push
    previous = run(store, "push", BEFORE)
    assert source_run_of(store, later).id == previous.id  # type: ignore[union-attr]
    assert source_run_of(store, run(store, "push", "d" * 40)) is None  # no before: nothing to reuse


@pytest.mark.parametrize(("source", "consumer", "allowed"), [
    ("push", "pull_request", True), ("base", "pull_request", True), ("pull_request", "pull_request", False),
    ("push", "base", True), ("base", "base", False), ("pull_request", "base", False),
    ("push", "push", True), ("base", "push", False), ("pull_request", "push", False),
    ("push", "canary", False),
])
def test_trust_only_flows_down(store: Store, source: str, consumer: str, allowed: bool) -> None:
    assert may_serve(run(store, source, BASE), run(store, consumer, HEAD)) is allowed
    assert not may_serve(run(store, source, BASE, repo="octo/other", repo_id=9), run(store, consumer, HEAD))
