"""The `compile-ci` command as a maintainer meets it in a shell: help that says what exists, and check-config."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "service.cli", *args], capture_output=True, text=True, cwd=cwd,
                          check=False, timeout=60)


def test_top_level_help_names_only_commands_that_exist() -> None:
    shown = cli("--help").stdout
    listed = [line.split()[0] for line in shown.splitlines() if line.startswith("    ") and line.split()]
    assert "emulator" not in listed and "emulator" not in shown.split("{")[1].split("}")[0]
    assert "emulator," not in shown.split("\n\n")[1]  # the description names the same commands
    for command in ("sandbox", "web", "worker", "beat", "images", "check-config"):
        assert command in shown


@pytest.mark.parametrize(("command", "option"), [("web", "--bind"), ("web", "--workers"), ("check-config", "path")])
def test_every_option_has_help_text(command: str, option: str) -> None:
    shown = cli(command, "--help").stdout
    line = next(line for line in shown.splitlines() if line.strip().startswith(option))
    following = shown.split(line, 1)[1].splitlines()[:1]
    assert "default" in line + " ".join(following), shown


def test_check_config_of_a_missing_file_or_a_directory_fails_clearly(tmp_path: Path) -> None:
    missing = cli("check-config", str(tmp_path / "nope.toml"))
    assert missing.returncode == 2 and missing.stderr.strip().endswith("nope.toml: no such file")
    folder = cli("check-config", str(tmp_path))
    assert folder.returncode == 2 and folder.stderr.strip().endswith(": is a directory")
    assert "Traceback" not in folder.stderr


def test_check_config_summarises_a_valid_file(tmp_path: Path) -> None:
    (tmp_path / ".compile-ci.toml").write_text('[suites]\nrun = ["correctness"]\ndevices = ["cpu"]\n')
    done = cli("check-config", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:3] == [".compile-ci.toml: OK", "  suites:  correctness", "  devices: cpu"]
    assert "RepoConfig(" not in done.stdout


def test_check_config_lists_problems_in_file_order(tmp_path: Path) -> None:
    path = tmp_path / "ci.toml"
    path.write_text('[targets]\nmodels = ["a.b"]\n[suites]\nrun = ["correctness", "correctness"]\ndevices = []\n')
    done = cli("check-config", str(path))
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert [line.split(":")[1] for line in lines] == ["2", "4", "5"], lines
    assert lines[0].startswith(f"{path}:2: [targets] models")
