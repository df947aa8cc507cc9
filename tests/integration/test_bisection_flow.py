"""A pull request whose declared post-grad pass turns a result wrong, through the real service: the worker passes the
bisection's budget and deadline into the job, the job (the LocalRunner, real torch.compile) bisects the failure
after its tests, and the reporter reads the job's bisect.json back: one line under the failing test in the check
run's text and in the new-failure lists of its summary and of the sticky comment, the whole log on the test page."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from service.config import Settings
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.sandbox.sample_repo import commit_file
from service.store import Store
from service.web.app import create_app
from suites.naming import sanitise_nodeid
from tests.integration.test_base_compare_torch import (  # noqa: F401 - fixtures
    REWRITING_PASS,
    await_compared,
    open_pr,
    repo,
    settings,
    worker,
)

pytestmark = pytest.mark.e2e
# The base's pass rewritten as pull request 42 of test_base_compare_torch has it (x + x -> x * 2), the factor wrong.
WRONG_PASS = REWRITING_PASS.replace("(node.args[0], 2)", "(node.args[0], 3)")
TEST = "test_declared.py::test_declared_model[residual]"
LINE = ("wrong from `inductor` · `post_grad_passes #{number}` (`post_grad_custom_post_pass`) · red only with your "
        "change to `torch._inductor.config.post_grad_custom_post_pass`")


def test_a_wrong_pass_is_bisected_in_its_job_and_named_where_the_maintainer_looks(
    settings: Settings, repo: Path, worker: None, emulator: GitHubEmulator,  # noqa: F811
) -> None:
    base = subprocess.run(["git", "-C", str(repo), "rev-parse", "main"], check=True, capture_output=True,
                          text=True).stdout.strip()
    wrong = commit_file(repo, "pr44", "zoo/passes.py", WRONG_PASS, "x + x -> x * 3")
    open_pr(settings, 44, wrong, base)
    run = await_compared(emulator, [wrong])[wrong]
    assert run["conclusion"] == "failure" and run["output"]["title"].startswith("1 new failure"), run["output"]

    store = Store(settings.database_url)
    (head,) = [job for r in store.runs_at_sha("octo/zoo", wrong) for job in store.jobs_of(r.id)]
    (nodeid,) = [r.nodeid for r in store.results_of(head.id, head.attempt) if r.outcome == "failed"]
    assert nodeid.endswith(TEST), nodeid
    folder = settings.artifacts_dir / head.run_id / head.id / str(head.attempt) / "tests" / sanitise_nodeid(nodeid)
    found = json.loads((folder / "bisect.json").read_text())
    number = found["number"]
    # Named at its hook with its line: the repository's pass, not the model the failing test ran it on.
    def_line = WRONG_PASS.splitlines().index("def double_add_to_mul(graph):") + 1
    assert (found["place"], found["where"]) == ("torch._inductor.config.post_grad_custom_post_pass",
                                                f"zoo/passes.py:{def_line}"), found
    line = LINE.format(number=number)
    assert f"Bisected: {line}" in run["output"]["text"], run["output"]["text"]
    summary = run["output"]["summary"].split("**New failures**", 1)[1].split("**", 1)[0]
    assert line in summary, run["output"]["summary"]
    deadline = time.monotonic() + 30  # the comment follows the check run's report in the same task
    while not emulator.comments and time.monotonic() < deadline:
        time.sleep(0.1)
    (comment,) = emulator.comments
    assert line in comment["body"].split("**New failures**", 1)[1], comment["body"]

    client: FlaskClient = create_app(settings).test_client()
    page = client.get(f"/jobs/{head.id}/tests/{sanitise_nodeid(nodeid)}").get_data(as_text=True)
    assert f"wrong from inductor · post_grad_passes #{number} (post_grad_custom_post_pass)" in page
    assert "run 1, as the test ran: wrong" in page and "TORCH_BISECT_SUBSYSTEM=post_grad_passes" in page
