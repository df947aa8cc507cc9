"""When a job is concluded from its source without a runner (service/planning/reuse_whole.py): only documentation
changed, the source ended with a result for every test, each test of a group the change leaves, under the same
inputs and a known fingerprint. Each named case breaks one condition; a seeded random walk over the conditions checks
that the job skips its runner exactly when all of them hold."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from service.jobs import lifecycle
from service.jobs.lifecycle import Conclusion, Outcome
from service.planning.affected import only_documentation
from service.planning.reuse_whole import reused_whole
from service.store import Job, NewRun, Store, TestRecord
from service.store.reuse import Planned, record_fingerprint, record_plan
from service.store.shards import NOT_RUN
from suites.shard_plan import CORPUS_GROUP

VIT = "zoo.vit:examples"
LEFT = (CORPUS_GROUP, VIT)
KEYS = {CORPUS_GROUP: "k-corpus", VIT: "k-vit"}
_refs = itertools.count()


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(f"sqlite:///{tmp_path / 'ci.db'}")


def job(store: Store, trigger: str, sha: str) -> Job:
    run, _ = store.create_run_if_absent(NewRun(
        repo_full_name="octo/zoo", repo_id=1, installation_id=2, clone_url="file:///x", private=False,
        trigger=trigger, trigger_ref=f"{trigger}/{next(_refs)}", pr_number=7 if trigger == "pull_request" else None,
        branch="main", head_sha=sha, sender="o"))  # type: ignore[arg-type]
    store.add_jobs_if_absent([lifecycle.new_job(run, "correctness", "cpu", 600)])
    started = lifecycle.start(store, store.jobs_of(run.id)[0].id, "local")
    assert started is not None
    return started


def plan(store: Store, made: Job, source: str = "", **changed: object) -> None:
    fields: dict[str, object] = {"suites": "s", "build": "b", "device": "cpu", "torch": "", "config": "c",
                                 "keys": KEYS}
    fields.update(changed)
    record_plan(store, made.id, made.attempt, Planned(source_job_id=source, source_run_id="", reused=LEFT, note="",
                                                      **fields))  # type: ignore[arg-type]


def finish(store: Store, made: Job, records: list[TestRecord], fingerprint: str | None = "",
           conclusion: Conclusion = Conclusion.SUCCESS) -> None:
    store.replace_results(made.id, made.attempt, records)
    record_fingerprint(store, made.id, made.attempt, fingerprint)
    assert lifecycle.complete(store, made, Outcome(conclusion, "ok")) is not None


def record(nodeid: str, groups: list[str] | None, outcome: str = "passed") -> TestRecord:
    return TestRecord(nodeid, outcome, 1.0, metrics=None if groups is None else {"targets": groups})


GOOD = [record("t::test_corpus", [CORPUS_GROUP]), record("t::test_model[vit]", [VIT])]


def scenario(store: Store, *, records: list[TestRecord] = GOOD, fingerprint: str | None = "",
             conclusion: Conclusion = Conclusion.SUCCESS, source_done: bool = True,
             mine: dict[str, object] | None = None) -> tuple[Job, Job]:
    source = job(store, "push", "b" * 40)
    plan(store, source)
    if source_done:
        finish(store, source, records, fingerprint, conclusion)
    head = job(store, "pull_request", "c" * 40)
    plan(store, head, source.id, **(mine or {}))
    return source, head


def test_a_documentation_change_takes_every_test_of_an_ended_source_without_a_runner(store: Store) -> None:
    source, head = scenario(store, fingerprint="f00d")
    whole = reused_whole(store, head, source.id, LEFT, ["README.md", "docs/guide.rst"])
    assert whole is not None
    assert (whole.source, whole.nodeids, whole.fingerprint) == (source.id, ("t::test_corpus", "t::test_model[vit]"),
                                                                "f00d")
    assert "no runner was started" in whole.line() and "2 tests" in whole.line()
    assert reused_whole(store, head, source.id, LEFT, []) is not None  # nothing changed: a base run at its push's sha


@pytest.mark.parametrize(("case", "changed", "kwargs", "left"), [
    ("a Python file changed", ["tools/release.py"], {}, LEFT),
    ("the config changed", [".compile-ci.toml"], {}, LEFT),
    ("a Python file under docs/", ["README.md", "docs/conf.py"], {}, LEFT),
    ("a conftest changed", ["docs/conftest.py"], {}, LEFT),
    ("an install file", ["requirements.txt"], {}, LEFT),
    ("a file of no known kind", ["data/weights.bin"], {}, LEFT),
    ("the paths were not read", None, {}, LEFT),
    ("nothing is left to the source", ["README.md"], {}, ()),
    ("a group the change reaches", ["README.md"], {}, (CORPUS_GROUP,)),
    ("a test of no recorded group", ["README.md"], {"records": [*GOOD, record("t::odd", None)]}, LEFT),
    ("a test the source still waits for", ["README.md"],
     {"records": [*GOOD[:1], record("t::test_model[vit]", [VIT], NOT_RUN)]}, LEFT),
    ("the source has no results", ["README.md"], {"records": []}, LEFT),
    ("the source's fingerprint is unknown", ["README.md"], {"fingerprint": None}, LEFT),
    ("the source did not end with results", ["README.md"], {"conclusion": Conclusion.TIMED_OUT}, LEFT),
    ("the source still runs", ["README.md"], {"source_done": False}, LEFT),
    ("another runner build", ["README.md"], {"mine": {"build": "b2"}}, LEFT),
    ("another shared config", ["README.md"], {"mine": {"config": "c2"}}, LEFT),
    ("another torch", ["README.md"], {"mine": {"torch": "2.14"}}, LEFT),
    ("a target's imports differ", ["README.md"], {"mine": {"keys": {**KEYS, VIT: "other"}}}, LEFT),
    ("a target more (a base run with its pull request's config)", ["README.md"],
     {"mine": {"keys": {**KEYS, "zoo.mlp:examples": "k-mlp"}}}, LEFT),
])
def test_anything_else_starts_the_runner(store: Store, case: str, changed: list[str] | None,
                                         kwargs: dict[str, object], left: tuple[str, ...]) -> None:
    source, head = scenario(store, **kwargs)  # type: ignore[arg-type]
    assert reused_whole(store, head, source.id, left, changed) is None, case


DOCS = ["README.md", "docs/a.md", "CHANGELOG.rst", ".github/workflows/ci.yml", "LICENSE"]
OTHER = ["zoo/vit.py", "tools/x.py", ".compile-ci.toml", "conftest.py", "setup.cfg", "requirements-dev.txt",
         "data/w.bin", "docs/conf.py", "x.pth"]


def test_a_seeded_walk_over_the_conditions_skips_the_runner_exactly_when_all_hold(tmp_path: Path) -> None:
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    for step in range(40):
        store = Store(f"sqlite:///{tmp_path / f'ci{step}.db'}")
        docs_only, no_group, waiting = rng.random() < 0.6, rng.random() < 0.2, rng.random() < 0.2
        known, same_build, done = rng.random() < 0.8, rng.random() < 0.8, rng.random() < 0.8
        changed = rng.sample(DOCS, rng.randint(0, 3)) + ([] if docs_only else rng.sample(OTHER, rng.randint(1, 2)))
        rng.shuffle(changed)
        records = [*GOOD, *([record("t::odd", None)] if no_group else []),
                   *([record("t::waits", [VIT], NOT_RUN)] if waiting else [])]
        source, head = scenario(store, records=records, fingerprint="" if known else None, source_done=done,
                                mine={} if same_build else {"build": "b2"})
        holds = docs_only and not no_group and not waiting and known and same_build and done
        assert only_documentation(changed) == docs_only, (seed, changed)
        found = reused_whole(store, head, source.id, LEFT, changed)
        assert (found is not None) == holds, (seed, step, changed, no_group, waiting, known, same_build, done)
