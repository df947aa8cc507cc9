"""The `ops` suite in `.compile-ci.toml`: opt-in, on by default only for a repository that declares a compiler."""

from pathlib import Path

import suites
from service.planning.base_runs import BASE_TRIGGER
from service.planning.plan import builtin_suites, ops_scope, plan_jobs
from service.repo_config import RepoConfig, default_config, parse_repo_config
from service.store.rows import CANARY_TRIGGER

SHIPPED = builtin_suites(Path(suites.__file__).parent)


def test_ops_is_a_shipped_suite_that_no_default_list_gains() -> None:
    assert "ops" in SHIPPED
    assert "ops" not in default_config(SHIPPED).suites
    for text in (None, "", '[targets]\nmodels = ["zoo:examples"]\n', '[targets]\npost_grad_passes = ["p:fuse"]\n'):
        config = parse_repo_config(text, SHIPPED)
        assert isinstance(config, RepoConfig)
        assert "ops" not in config.suites, text
        assert set(config.suites) == set(SHIPPED) - {"ops"}, text


def test_a_declared_compiler_adds_ops_to_the_default_run_and_reaches_the_job() -> None:
    config = parse_repo_config('[targets]\ncompiler = ["forkpkg.inductor:install"]\n', SHIPPED)
    assert isinstance(config, RepoConfig)
    assert "ops" in config.suites and set(config.suites) == set(SHIPPED)
    assert config.targets == {"compiler": ["forkpkg.inductor:install"]}  # COMPILE_CI_TARGETS carries it
    assert [job.suite for job in plan_jobs(config, ("cpu",), 60) if job.device == "cpu"].count("ops") == 1


def test_ops_can_be_asked_for_by_name_and_a_bad_compiler_spec_is_a_problem() -> None:
    config = parse_repo_config('[suites]\nrun = ["ops"]\ndevices = ["cpu"]\n', SHIPPED)
    assert isinstance(config, RepoConfig) and config.suites == ("ops",)
    problems = parse_repo_config('[targets]\ncompiler = ["forkpkg.inductor"]\n', SHIPPED)
    assert isinstance(problems, list)
    assert problems[0].render().startswith(".compile-ci.toml:2: [targets] compiler: 'forkpkg.inductor' is not of")


def test_the_default_branch_sweeps_every_op_and_a_pull_request_what_it_touches() -> None:
    assert ops_scope("push") == ops_scope(CANARY_TRIGGER) == "all"
    assert {ops_scope(t) for t in ("pull_request", BASE_TRIGGER)} == {"aimed"}
