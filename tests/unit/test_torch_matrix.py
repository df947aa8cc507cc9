"""The torch matrix: the deployment's versions, the names a version adds (and the default's it leaves alone),
`[suites] torch` and `[canary]`, planning and routing, the advisory verdict, the canary's comparison, the runners'
versions (real interpreters) and the image recipes of another torch."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runners.images import ImageBuildError, recipes
from runners.images.torch_release import resolve_torch, torch_recipe
from runners.local import LocalRunner
from service.compare.canary_diff import compare_canary
from service.compare.job_verdict import job_verdict
from service.config import ConfigError, Settings
from service.github.checks import render_check_run
from service.jobs import lifecycle
from service.planning import torch_matrix
from service.planning.plan import PlannedJob, plan_jobs
from service.repo_config import parse_repo_config
from service.store import Job, NewRun, Run, Store, TestRecord, TestResult, job_id_for
from service.store.rows import check_name_of
from service.torch_versions import TorchVersion, parse_versions, queue_for, same_release, split_lane, torch_of_job_id
from tests.next_torch import next_python
from tests.rows import force_job

BASE_ENV = {"COMPILE_CI_WEBHOOK_SECRET": "s", "COMPILE_CI_GITHUB_APP_ID": "1",
            "COMPILE_CI_GITHUB_PRIVATE_KEY": "-----BEGIN RSA PRIVATE KEY-----\nx\n-----END RSA PRIVATE KEY-----"}


def settings(**env: str) -> Settings:
    return Settings.from_env({**BASE_ENV, **{f"COMPILE_CI_{k}": v for k, v in env.items()}})


@pytest.mark.parametrize(("raw", "versions", "problem"), [
    ("2.13", (TorchVersion("2.13"),), ""),
    ("2.13, 2.14 advisory", (TorchVersion("2.13"), TorchVersion("2.14", True)), ""),
    (" 2.12 ,2.13,2.14  advisory ", (TorchVersion("2.12"), TorchVersion("2.13"), TorchVersion("2.14", True)), ""),
    ("2.14 advisory, 2.13", None, "the first version is the default and cannot be advisory"),
    ("2.13, 2.13", None, "2.13 is listed more than once"),
    ("2.13.1", None, "'2.13.1' is not a torch version of the form major.minor"),
    ("2.13, 2.14 rc", None, "only the word 'advisory' may follow"),
    (" , ", None, "lists no version"),
])
def test_the_deployments_versions(raw: str, versions: tuple[TorchVersion, ...] | None, problem: str) -> None:
    parsed, problems = parse_versions(raw)
    if versions is not None:
        assert (parsed, problems) == (versions, [])
    else:
        assert any(problem in p for p in problems), problems


def test_settings_refuse_a_bad_matrix_all_at_once() -> None:
    with pytest.raises(ConfigError) as caught:
        settings(TORCH_VERSIONS="2.14 advisory", WORKER_TORCH="2.15", CANARY_HOUR="24")
    said = str(caught.value)
    assert "COMPILE_CI_TORCH_VERSIONS: the first version is the default" in said
    assert "COMPILE_CI_WORKER_TORCH must be one of COMPILE_CI_TORCH_VERSIONS (2.14), got '2.15'" in said
    assert "COMPILE_CI_CANARY_HOUR must be an hour from 0 to 23" in said
    assert settings().torch_versions == (TorchVersion("2.13"),)  # the default: one version, as before


def test_the_default_versions_names_are_unchanged_and_another_adds_its_own() -> None:
    assert (job_id_for("r", "correctness", "cpu"), check_name_of("correctness", "cpu"), queue_for("cpu", "")) == (
        "r-correctness-cpu", "correctness (cpu)", "cpu")
    assert (job_id_for("r", "correctness", "cpu", "2.14"), check_name_of("correctness", "cpu", "2.14"),
            queue_for("cuda", "2.14")) == ("r-correctness-cpu-torch2.14", "correctness (cpu, torch 2.14)",
                                           "cuda-torch2.14")
    assert [torch_of_job_id(j) for j in ("r-repo-cpu-torch2.14", "r-repo-cpu", "r-approval-none")] == ["2.14", "", ""]
    assert (split_lane("cpu-torch2.14"), split_lane("cuda")) == (("cpu", "2.14"), ("cuda", ""))
    assert [same_release(v, "2.14") for v in ("2.14.1+cu130", "2.14.0rc1", "2.14", "2.141.0", "2.13.0")] == [
        True, True, True, False, False]


SUITES = ("correctness",)


@pytest.mark.parametrize(("text", "versions", "expected"), [
    ('[suites]\ntorch = ["2.13", "2.14"]\n', ("2.13", "2.14"), ("2.13", "2.14")),
    ('[suites]\ntorch = ["2.14"]\n', None, ("2.14",)),  # the form alone (compile-ci check-config, a job's re-read)
    ('[suites]\ntorch = ["2.11"]\n', ("2.13", "2.14"),
     ".compile-ci.toml:2: [suites] torch: unknown value '2.11' (expected one of: 2.13, 2.14)"),
    ('[suites]\ntorch = ["2.x"]\n', None, ".compile-ci.toml:2: [suites] torch: '2.x' is not a torch version"),
    ('[suites]\ntorch = []\n', ("2.13",), ".compile-ci.toml:2: [suites] torch: is empty"),
    ('[suites]\ntorch = ["2.13", "2.13"]\n', ("2.13",), ".compile-ci.toml:2: [suites] torch: '2.13' is listed more"),
    ('[canary]\nenabled = "no"\n', None, ".compile-ci.toml:2: [canary] enabled: must be true or false, got 'no'"),
    ('[canary]\nwhen = 3\n', None, ".compile-ci.toml:2: [canary] when: unknown key (expected one of: enabled)"),
])
def test_suites_torch_and_canary_in_the_repository_config(text: str, versions: tuple[str, ...] | None,
                                                          expected: object) -> None:
    parsed = parse_repo_config(text, SUITES, versions)
    if isinstance(expected, tuple):
        assert not isinstance(parsed, list) and parsed.torch == expected and parsed.canary
    else:
        assert isinstance(parsed, list) and parsed[0].render().startswith(str(expected)), parsed


def test_a_repository_opts_out_of_the_canary() -> None:
    parsed = parse_repo_config("[canary]\nenabled = false\n", SUITES)
    assert not isinstance(parsed, list) and parsed.canary is False and parsed.torch == ()


MATRIX = settings(TORCH_VERSIONS="2.13, 2.14 advisory", DEVICES="cpu")


def _run(trigger: str = "pull_request") -> Run:
    return Run(id="0123456789abcdef", repo_full_name="o/r", head_sha="f" * 40, repo_id=1, installation_id=2,
               trigger=trigger)


def _planned(text: str, trigger: str = "pull_request", live: frozenset[str] | None = None) -> list[PlannedJob]:
    config = parse_repo_config(text, SUITES, torch_matrix.names(MATRIX))
    assert not isinstance(config, list)
    versions = torch_matrix.versions_of(_run(trigger), config, MATRIX)
    return torch_matrix.expand(plan_jobs(config, ("cpu",), 30), versions, MATRIX, live)


def test_planning_one_job_per_version_and_the_canary_on_the_advisory_one_only() -> None:
    both = '[suites]\ndevices = ["cpu"]\ntorch = ["2.13", "2.14"]\n'
    assert [(p.torch, p.advisory, p.skip_reason) for p in _planned(both)] == [("", False, None), ("2.14", True, None)]
    assert [p.torch for p in _planned('[suites]\ndevices = ["cpu"]\n')] == [""]  # no key: the default only
    assert [(p.torch, p.advisory) for p in _planned('[suites]\ndevices = ["cpu"]\n', "canary")] == [("2.14", True)]
    # A live cpu worker but none for 2.14: that job is settled neutral, saying what to start; the other runs.
    unserved = _planned(both, live=frozenset({"cpu", "github"}))
    assert unserved[0].skip_reason is None and unserved[1].runner == "cpu runner for torch 2.14"
    assert "compile-ci worker --queues cpu --torch 2.14" in (unserved[1].skip_reason or "")
    # Nobody answered, or no job queue has a worker yet (starting up): the jobs wait in their queues.
    assert all(p.skip_reason is None for p in _planned(both, live=frozenset({"github"})))
    row = torch_matrix.on_version(lifecycle.new_job(_run(), "correctness", "cpu", 60), _planned(both)[1])
    assert (row.id, row.check_name, row.torch_advisory) == ("0123456789abcdef-correctness-cpu-torch2.14",
                                                           "correctness (cpu, torch 2.14)", 1)


@pytest.mark.parametrize(("conclusion", "shown"), [
    ("failure", ("neutral", "Advisory torch, not blocking — 1 failed, 1 passed")),
    ("timed_out", ("neutral", "Advisory torch, not blocking — Timed out")),
    ("success", ("success", "2 passed")),
    ("cancelled", ("cancelled", "Superseded")),
])
def test_an_advisory_version_is_never_red(conclusion: str, shown: tuple[str, str]) -> None:
    title = {"failure": "", "timed_out": "Timed out", "success": "", "cancelled": "Superseded"}[conclusion]
    raw = "1 failed, 1 passed" if conclusion == "failure" else "2 passed"
    verdict = job_verdict(conclusion, title, raw, None, advisory=True)
    assert (verdict.conclusion, verdict.title) == shown
    assert job_verdict(conclusion, title, raw, None).conclusion == conclusion  # the same job on a non-advisory one


def test_an_advisory_check_run_lists_its_failures_as_warnings_with_a_rerun_button() -> None:
    job = Job(id="0123456789abcdef-correctness-cpu-torch2.14", run_id="0123456789abcdef", suite="correctness",
              device="cpu", torch="2.14", torch_advisory=1, state="completed", conclusion="failure", attempt=1,
              passed=1, failed=1, skipped=0, errors=0, detail="", title="", torch_version="2.14.1", runner="local")
    failing = TestResult(nodeid="t.py::test_knob", outcome="failed", message="AttributeError: gone", file="t.py",
                         line=3)
    view = render_check_run(_run(), job, [failing], "http://ci/jobs/x")
    assert (view.name, view.conclusion) == ("correctness (cpu, torch 2.14)", "neutral")
    assert "torch 2.14 is advisory on this deployment" in view.summary and "`t.py::test_knob`" in view.summary
    assert [a["annotation_level"] for a in view.annotations] == ["warning"]
    assert [a["identifier"] for a in view.actions] == ["rerun"]


def _result(nodeid: str, outcome: str, breaks: int, seconds: float) -> TestRecord:
    return TestRecord(nodeid, outcome, 1.0, metrics={"graph_breaks": breaks, "compile_time_s": seconds})


def test_the_canary_comparison_lists_what_the_advisory_torch_breaks(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite3'}")
    sha = "a" * 40
    runs = {}
    for trigger, ref in (("push", "refs/heads/main"), ("canary", "canary/2.14/2026-11-26")):
        runs[trigger], _ = store.create_run_if_absent(NewRun("o/r", 1, 2, "https://x/o/r.git", False, trigger, ref,
                                                             None, "main", sha, ""))
        store.transition(Run, runs[trigger].id, {}, {"state": "planned"})
    push_job = lifecycle.new_job(runs["push"], "correctness", "cpu", 60)
    canary_job = torch_matrix.on_version(lifecycle.new_job(runs["canary"], "correctness", "cpu", 60),
                                         PlannedJob("correctness", "cpu", 60, torch="2.14", advisory=True))
    store.add_jobs_if_absent([push_job, canary_job])
    for job, results in ((push_job, [_result("t::same", "passed", 0, 1.0), _result("t::breaks", "passed", 0, 2.0),
                                     _result("t::fails", "passed", 0, 1.0)]),
                         (canary_job, [_result("t::same", "passed", 0, 1.0), _result("t::breaks", "passed", 2, 5.0),
                                       _result("t::fails", "failed", 0, 1.0)])):
        force_job(store, job.id, state="completed", conclusion="success", attempt=1)
        store.replace_results(job.id, 1, results)
    (compared,) = compare_canary(store, store.get_run(runs["canary"].id))
    assert compared.status == "compared" and compared.baseline is not None and compared.baseline.id == push_job.id
    assert compared.new_failures == ["t::fails"] and compared.breaks_something
    assert [(d.nodeid, d.base, d.head) for d in compared.graph_breaks] == [("t::breaks", 0, 2)]
    assert compared.compile_ratio == pytest.approx(7.0 / 4.0) and compared.slowest[0] == ("t::breaks", 2.5)


def test_runners_name_their_torch_and_a_job_of_another_torch_is_refused() -> None:
    default = LocalRunner()  # this interpreter: the shared .venv's torch 2.13
    assert same_release(default.torch_version("cpu"), "2.13")
    job = Job(id="r-repo-cpu-torch2.14", run_id="r", suite="repo", device="cpu", torch="2.14")
    with pytest.raises(torch_matrix.RunnerVersionMismatch, match="has torch 2.13.*the job is for torch 2.14"):
        torch_matrix.check_runner(default, job, MATRIX)
    torch_matrix.check_runner(default, Job(id="r-repo-cpu", run_id="r", suite="repo", device="cpu", torch=""), MATRIX)
    # Two venvs' interpreters are both `python`: their compile caches are told apart by their torch.
    other = LocalRunner(str(next_python()))  # installed beside the tests by scripts/test.sh: waits for it
    assert other.cache_key("cpu") != default.cache_key("cpu") and "torch2.14.1" in other.cache_key("cpu")
    torch_matrix.check_runner(other, job, MATRIX)


def test_worker_images_and_image_recipes_of_another_torch() -> None:
    assert torch_matrix.runner_images(MATRIX) == {"cpu": "compile-ci/runner-cpu:latest",
                                                  "cuda": "compile-ci/runner-cuda:latest"}
    worker = settings(TORCH_VERSIONS="2.13, 2.14", WORKER_TORCH="2.14", RUNNER_IMAGE_CPU="reg:5000/ci/cpu:v1")
    assert torch_matrix.runner_images(worker) == {"cpu": "reg:5000/ci/cpu:torch2.14",
                                                  "cuda": "compile-ci/runner-cuda:torch2.14"}
    recipe = torch_recipe(recipes()["cpu"], "2.14.1")
    assert (recipe.tag, recipe.requirements[0], recipe.build_args) == (
        "compile-ci/runner-cpu:torch2.14", "torch==2.14.1", (("TORCH_VERSION", "2.14.1"),))
    assert resolve_torch("2.14.x", ["2.15.0", "2.14.1", "2.14.0", "2.13.0+cpu", "2.14.2rc1"]) == "2.14.1"
    assert resolve_torch("2.15.0rc1") == "2.15.0rc1"
    with pytest.raises(ImageBuildError, match="has no torch 2.16 release"):
        resolve_torch("2.16.x", ["2.15.0"])


def test_a_worker_started_for_a_version_consumes_that_versions_queues(monkeypatch: pytest.MonkeyPatch) -> None:
    from service.cli import _worker_queues

    monkeypatch.setenv("COMPILE_CI_WORKER_TORCH", "")  # so that what the worker command sets is undone after
    assert _worker_queues(MATRIX, ["cpu", "github"], "") == ["cpu", "github"]
    assert _worker_queues(MATRIX, ["cpu", "cuda", "github"], "2.14") == ["cpu-torch2.14", "cuda-torch2.14", "github"]
    assert os.environ["COMPILE_CI_WORKER_TORCH"] == "2.14"  # what the worker's runner is chosen by
    assert _worker_queues(MATRIX, ["cpu"], "2.13") == ["cpu"]  # the default's queues are the plain ones
    with pytest.raises(SystemExit, match=r"--torch 2.15 is not one of COMPILE_CI_TORCH_VERSIONS \(2.13, 2.14\)"):
        _worker_queues(MATRIX, ["cpu"], "2.15")
