"""`.compile-ci.toml`: what is accepted, and every problem reported with its line."""

import json

import pytest

from service.repo_config import RepoConfig, parse_repo_config

BUILTIN = ("autograd", "correctness", "freezing")


def test_absent_file_means_every_builtin_suite_on_every_device() -> None:
    assert parse_repo_config(None, BUILTIN) == RepoConfig(suites=BUILTIN, devices=("cpu", "cuda"))


def test_full_file() -> None:
    text = """
[install]
requirements = ["tinydep==1.0", "numpy[extra] >=1.26, <3"]
package = false
[targets]
models = ["mypkg.zoo:examples"]
post_grad_passes = ["mypkg.passes:fuse_conv_relu"]
[suites]
run = ["correctness", "repo"]
devices = ["cuda"]
repo_tests = ["tests/compile"]
timeout_minutes = 20
"""
    assert parse_repo_config(text, BUILTIN) == RepoConfig(
        suites=("correctness", "repo"), devices=("cuda",), requirements=("tinydep==1.0", "numpy[extra] >=1.26, <3"),
        install_package=False,
        targets={"models": ["mypkg.zoo:examples"], "post_grad_passes": ["mypkg.passes:fuse_conv_relu"]},
        repo_tests=("tests/compile",), timeout_minutes=20,
    )


def test_repo_tests_add_the_repo_suite_to_the_default_run() -> None:
    config = parse_repo_config('[suites]\nrepo_tests = ["tests"]\n', BUILTIN)
    assert isinstance(config, RepoConfig)
    assert config.suites == (*BUILTIN, "repo")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[suites\nrun = 1", [".compile-ci.toml:1: invalid TOML"]),
        ('[suites]\nrun = ["corectness"]', [".compile-ci.toml:2: [suites] run: unknown value 'corectness'"]),
        ('[suites]\ndevices = "cpu"', [".compile-ci.toml:2: [suites] devices: must be a list of strings"]),
        ('[suites]\ndevices = ["tpu"]', [".compile-ci.toml:2: [suites] devices: unknown value 'tpu'"]),
        ("[suites]\n\ntimeout_minutes = 0", [".compile-ci.toml:3: [suites] timeout_minutes: must be an integer"]),
        ('[suites]\nrun = ["repo"]', [".compile-ci.toml:2: [suites] run: the 'repo' suite needs"]),
        ('[targets]\nmodels = ["mypkg.zoo"]', [".compile-ci.toml:2: [targets] models: 'mypkg.zoo' is not of"]),
        ("[suites]\nretries = 3", [".compile-ci.toml:2: [suites] retries: unknown key"]),
        ('install = "x"', [".compile-ci.toml:1: install must be a table"]),
        (
            '[suites]\nrun = ["nope"]\n[targets]\nmodels = [1]\n',
            [".compile-ci.toml:2: [suites] run: unknown value 'nope'", ".compile-ci.toml:4: [targets] models: must be"],
        ),
        ("[suites]\ndevices = []", [".compile-ci.toml:2: [suites] devices: is empty"]),
        ('[suites]\nrun = ["freezing", "freezing"]', [".compile-ci.toml:2: [suites] run: 'freezing' is listed more"]),
        (
            '[targets]\nmodels = ["a.b"]\n[suites]\nrun = ["nope"]\n[install]\ncommand = 1\n',
            [".compile-ci.toml:2: [targets] models", ".compile-ci.toml:4: [suites] run",
             ".compile-ci.toml:6: [install]"],
        ),
    ],
    ids=["toml-syntax", "unknown-suite", "devices-not-list", "unknown-device", "zero-timeout", "repo-without-tests",
         "bad-target-spec", "unknown-key", "install-not-table", "several-problems-at-once",
         "no-devices", "duplicate-suite", "sorted-by-line"],
)
def test_problems_name_file_line_and_what_is_wrong(text: str, expected: list[str]) -> None:
    problems = parse_repo_config(text, BUILTIN)
    assert isinstance(problems, list)
    rendered = [p.render() for p in problems]
    assert len(rendered) == len(expected), rendered
    for line, prefix in zip(rendered, expected, strict=True):
        assert line.startswith(prefix), line


@pytest.mark.parametrize(
    ("requirement", "why"),
    [
        ("--index-url http://evil.example/simple", "pip options are not allowed"),
        ("-f http://evil.example/wheels", "pip options are not allowed"),
        ("--extra-index-url=http://evil.example/simple", "pip options are not allowed"),
        ("-e .", "pip options are not allowed"),
        ("-r other.txt", "pip options are not allowed"),
        ("tinydep @ https://evil.example/tinydep-1.0-py3-none-any.whl", "URLs and paths are not allowed"),
        ("git+https://evil.example/tinydep.git", "URLs and paths are not allowed"),
        ("./vendored/tinydep", "URLs and paths are not allowed"),
        ("tinydep==1.0 --hash=sha256:00", "pip options are not allowed"),
        ("tinydep==1.0\n--index-url http://evil.example/simple", "pip options are not allowed"),
        ("tinydep; python_version > '3'", "is not of the form"),
        ("torch==2.0", "comes with the runner image"),
    ],
    ids=["index-url", "find-links", "extra-index-url", "editable", "nested-file", "direct-url", "vcs", "path",
         "hash-option", "smuggled-newline", "marker", "torch"],
)
def test_install_requirements_refuse_anything_that_picks_where_code_comes_from(requirement: str, why: str) -> None:
    # JSON strings are TOML basic strings: the line reaches the parser exactly as written here.
    problems = parse_repo_config(f"[install]\nrequirements = {json.dumps(['ok==1', requirement])}\n", BUILTIN)
    assert isinstance(problems, list), f"{requirement!r} was accepted"
    (problem,) = problems
    assert problem.render().startswith(".compile-ci.toml:2: [install] requirements:"), problem.render()
    assert why in problem.render()


def test_install_command_is_refused_rather_than_silently_ignored() -> None:
    problems = parse_repo_config('[install]\ncommand = "pip install -e ."\n', BUILTIN)
    assert isinstance(problems, list)
    assert problems[0].render().startswith(".compile-ci.toml:2: [install] command: unknown key")
