"""`.compile-ci.toml`: what is accepted, and every problem reported with its line."""

import pytest

from service.repo_config import RepoConfig, parse_repo_config

BUILTIN = ("autograd", "correctness", "freezing")


def test_absent_file_means_every_builtin_suite_on_every_device() -> None:
    assert parse_repo_config(None, BUILTIN) == RepoConfig(suites=BUILTIN, devices=("cpu", "cuda"))


def test_full_file() -> None:
    text = """
[install]
command = "pip install -e ."
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
        suites=("correctness", "repo"), devices=("cuda",), install_command="pip install -e .",
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
