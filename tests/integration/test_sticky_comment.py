"""The sticky pull-request comment: none while all is green and unchanged (unless asked for), created once, then
edited in place only when what it says changes. Real store, Redis locks and the emulator; no worker needed."""

from __future__ import annotations

from dataclasses import dataclass

from service.compare.comment import MARKER
from service.config import Settings
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.sandbox.stack import INSTALLATION_ID
from service.github.api import GitHubApp
from service.github.checks import summary_line
from service.github.sticky_comment import update_sticky_comment
from service.jobs import lifecycle
from service.store import NewRun, Run, Store, TestRecord
from service.store.claims import Claims
from tests.rendered import assert_inert
from tests.rows import force_job
from tests.unit.test_github_markdown import HOSTILE

FULL_NAME = "octo/sticky"


@dataclass
class Ctx:
    store: Store
    github: GitHubApp
    settings: Settings
    claims: Claims

    def job_url(self, job_id: str) -> str:
        return f"{self.settings.public_url}/jobs/{job_id}"


def _run(store: Store, trigger: str, sha: str, config: str = "", number: int | None = None) -> Run:
    new = NewRun(repo_full_name=FULL_NAME, repo_id=7, installation_id=INSTALLATION_ID, clone_url="", private=False,
                 trigger=trigger, trigger_ref=f"{trigger}/{number}", pr_number=number, branch="main",
                 head_sha=sha, sender="alice", base_sha="b" * 40 if trigger == "pull_request" else None,
                 config_text=config)
    run, _ = store.create_run_if_absent(new)
    job = lifecycle.new_job(run, "correctness", "cpu", 60)
    lifecycle.plan(store, run, [job], None)
    force_job(store, job.id, state="completed", conclusion="success", title="1 passed", passed=1, attempt=1)
    store.replace_results(job.id, 1, [TestRecord(nodeid="t.py::test_ok", outcome="passed", duration_s=0.1)])
    return store.get_run(run.id)  # type: ignore[return-value]


def test_a_comment_only_when_worth_it_or_asked_for_then_edited_in_place(
    settings: Settings, emulator: GitHubEmulator
) -> None:
    emulator.add_repo(FULL_NAME)
    emulator.add_installation(INSTALLATION_ID, repos=[FULL_NAME])
    store = Store(settings.database_url)
    ctx = Ctx(store, GitHubApp(settings), settings, Claims(settings.redis_url, 60))
    base = _run(store, "push", "b" * 40)
    quiet = _run(store, "pull_request", "c" * 40, number=1)
    asked = _run(store, "pull_request", "d" * 40, "[comment]\nalways = true\n", number=2)
    for run in (quiet, asked):
        store.link_base(run.id, base.id)
        update_sticky_comment(ctx, store.get_run(run.id))  # type: ignore[arg-type]
    assert [c["issue_number"] for c in emulator.comments] == [2]  # all green, unchanged: only where asked for
    (comment,) = emulator.comments
    assert "| ✅ 1 passed | 0 | 0 | 0 | 0 | 0 |" in comment["body"]

    update_sticky_comment(ctx, store.get_run(asked.id))  # type: ignore[arg-type]
    assert "edits" not in comment  # nothing changed: not sent again
    head_job = store.jobs_of(asked.id)[0]
    store.replace_results(head_job.id, 1, [TestRecord(nodeid="t.py::test_ok", outcome="passed", duration_s=0.1,
                                                      metrics={"reruns": ["failed"]})])
    update_sticky_comment(ctx, store.get_run(asked.id))  # type: ignore[arg-type]
    assert len(emulator.comments) == 1 and comment["edits"] == 1
    assert "**Flaky** (1)" in comment["body"] and "earlier attempts in this job: failed" in comment["body"]


def test_hostile_test_ids_and_reasons_reach_the_comment_inert_and_within_githubs_limit(
    settings: Settings, emulator: GitHubEmulator
) -> None:
    """A job names its tests and its graph breaks' reasons: in the comment the App posts they ping nobody, link
    nowhere and carry no HTML, and a comment too long for GitHub is cut with nothing left open."""
    emulator.add_repo(FULL_NAME)
    emulator.add_installation(INSTALLATION_ID, repos=[FULL_NAME])
    store = Store(settings.database_url)
    ctx = Ctx(store, GitHubApp(settings), settings, Claims(settings.redis_url, 60))
    config = "[budgets]\nnew_graph_breaks = 0\n"
    base, head = _run(store, "push", "b" * 40, config), _run(store, "pull_request", "e" * 40, config, number=3)
    store.link_base(head.id, base.id)
    base_records, head_records = [], []
    for i, text in enumerate(HOSTILE):
        wide = text + "☃" * 1000  # multi-byte: we cut in bytes (never fewer than GitHub's characters)
        for kind, outcome, base_outcome in (("fails", "failed", "passed"), ("at_base", "failed", "failed"),
                                            ("breaks", "passed", "passed"), ("flaky", "passed", "passed")):
            nodeid = f"t.py::test_{kind}_{i}[{wide}]"
            metrics = {"graph_breaks": 1, "graph_break_reasons": [wide]} if kind == "breaks" else (
                {"reruns": ["failed"]} if kind == "flaky" else None)
            head_records.append(TestRecord(nodeid=nodeid, outcome=outcome, duration_s=0.1, message=wide,
                                           metrics=metrics))
            base_records.append(TestRecord(nodeid=nodeid, outcome=base_outcome, duration_s=0.1,
                                           metrics={"graph_breaks": 0} if kind == "breaks" else None))
    head_job, base_job = store.jobs_of(head.id)[0], store.jobs_of(base.id)[0]
    store.replace_results(base_job.id, 1, base_records)
    store.replace_results(head_job.id, 1, head_records)
    # As a job whose tests ran ends: its title is its counts in pytest's words, so the comment judges it.
    failed = 2 * len(HOSTILE)
    force_job(store, head_job.id, conclusion="failure", title=summary_line({"failed": failed}), failed=failed, passed=0)
    update_sticky_comment(ctx, store.get_run(head.id))  # type: ignore[arg-type]

    (comment,) = emulator.comments  # the emulator refuses a body over GitHub's limit, as GitHub does
    body = comment["body"]
    assert len(body.encode()) <= 65_536
    shown = assert_inert(body, our_urls=(settings.public_url,),
                         our_comments=(MARKER.removeprefix("<!--").removesuffix("-->"),))
    for section in ("New failures", "Budget violations", "Flaky"):  # "Failing at the base too" is past the cut
        assert f"{section} (" in shown.visible
    named = [code for code in shown.codes if code.startswith("t.py::test_")]
    assert len(named) >= 40 and all(code.replace("☃", "").strip() for code in named)
    assert shown.visible.endswith("every check run lists all of its tests.")  # cut, and the cut said so
