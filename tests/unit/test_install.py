"""The install phase's pure parts: its cache key, pip's complaint picked out of its output, the outcome named."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from runners.protocol import RunResult
from service.config import Secret, Settings
from service.jobs import install
from service.jobs.install_step import INSTALL_EXIT
from service.jobs.outcome import Attempt

PIP_OUTPUT = """Looking in indexes: http://127.0.0.1:9/simple/
Collecting tinydep==9.9
ERROR: Could not find a version that satisfies the requirement tinydep==9.9 (from versions: 1.0)
ERROR: No matching distribution found for tinydep==9.9
"""


def _settings(tmp_path: Path) -> Settings:
    return Settings(webhook_secret=Secret("s"), github_app_id=1, github_private_key=Secret("k"), data_dir=tmp_path)


def test_key_changes_with_requirements_indexes_and_image(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    key = install.install_key(("a==1", "b==2"), settings, "docker-img-torch2.13.0")
    assert key == install.install_key(("b==2", "a==1"), settings, "docker-img-torch2.13.0")  # order is not content
    assert key != install.install_key(("a==1", "b==3"), settings, "docker-img-torch2.13.0")
    assert key != install.install_key(("a==1", "b==2"), settings, "docker-img-torch2.14.0")
    other_index = dataclasses.replace(settings, pip_index_url="https://mirror.example.org/simple")
    assert key != install.install_key(("a==1", "b==2"), other_index, "docker-img-torch2.13.0")


def test_pips_error_lines_not_its_progress() -> None:
    assert install._error_lines(PIP_OUTPUT) == [
        "ERROR: Could not find a version that satisfies the requirement tinydep==9.9 (from versions: 1.0)",
        "ERROR: No matching distribution found for tinydep==9.9"]


def test_install_failure_is_its_own_outcome_and_needs_the_marker(tmp_path: Path) -> None:
    result = install.failed_result(tmp_path, install.InstallFailed("download", install._error_lines(PIP_OUTPUT)))
    outcome = install.judged(tmp_path, result, Attempt())
    assert outcome is not None and (outcome.conclusion, outcome.title) == ("failure", "Install failed")
    assert "installing the [install] requirements failed" in outcome.detail and "tinydep==9.9" in outcome.detail
    assert "tinydep==9.9" in (tmp_path / "log.txt").read_text()
    # pytest's own exit codes, or the code without the job's marker, are judged as test results.
    (tmp_path / "install.json").write_text(json.dumps({"ok": False, "stage": "package", "lines": ["x"]}))
    assert install.judged(tmp_path, RunResult(2, 1.0), Attempt()) is None
    (tmp_path / "install.json").unlink()
    assert install.judged(tmp_path, RunResult(INSTALL_EXIT, 1.0), Attempt()) is None


def test_no_requirements_nothing_prepared(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    assert install.prepare(settings, (), "docker-img") is None
    assert not (settings.data_dir / "install").exists()


def test_the_log_shows_the_command_not_the_install_steps_source(tmp_path: Path) -> None:
    command = install.wrap(["python", "-m", "pytest"], "python", tmp_path / "src", None, True)
    assert install.STEP_SOURCE in command
    assert install.shown(tuple(command)) == ("python", "-c", "<install step>", str(tmp_path / "src"), "", "1", "--",
                                             "python", "-m", "pytest")
