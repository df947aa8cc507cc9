"""Getting a developer's clone ready for `compile-ci repro`: what it says of a clone at the job's commit with edits,
and of a malformed list of wheels (a sentence, never a traceback)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from service.repro_setup import ReproError, at_commit, install_wheels


def _git(clone: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(clone), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    repo = tmp_path / "clone"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "model.py").write_text("x = 1\n")
    _git(repo, "add", "model.py")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@example.test", "commit", "-qm", "first")
    return repo


def test_a_clone_at_the_jobs_commit_with_edits_is_warned_about(clone: Path) -> None:
    sha = _git(clone, "rev-parse", "HEAD")
    assert at_commit(clone, sha, None, checkout=True) == f"the clone is at the job's commit {sha[:12]}"
    (clone / "model.py").write_text("x = 2  # work in progress\n")
    said = at_commit(clone, sha, None, checkout=True)
    assert said.startswith("WARNING:") and "uncommitted changes (1 files: model.py)" in said, said
    assert "not the job's" in said and "git stash" in said
    assert _git(clone, "rev-parse", "HEAD") == sha and "work in progress" in (clone / "model.py").read_text()


def test_an_untracked_file_is_no_edit_of_the_jobs_files(clone: Path) -> None:
    sha = _git(clone, "rev-parse", "HEAD")
    (clone / "notes.txt").write_text("mine\n")
    assert at_commit(clone, sha, None, checkout=False) == f"the clone is at the job's commit {sha[:12]}"


@pytest.mark.parametrize("entry, missing", [
    ({"url": "/files/w.whl", "sha256": "0" * 64}, "name"),
    ({"name": "w.whl", "sha256": "0" * 64}, "url"),
    ({"name": "w.whl", "url": "/files/w.whl"}, "sha256"),
    ({"name": "w.whl", "url": "", "sha256": None}, "url, sha256"),
    ("w.whl", "name, url, sha256"),
])
def test_a_malformed_wheel_entry_is_a_sentence_not_a_key_error(tmp_path: Path, entry: object, missing: str) -> None:
    good = {"name": "ok.whl", "url": "/files/ok.whl", "sha256": "1" * 64}
    with pytest.raises(ReproError, match=f"an entry without its {missing} ") as raised:
        install_wheels("http://127.0.0.1:9", [good, entry], tmp_path)  # type: ignore[list-item]
    assert "malformed" in str(raised.value)
    assert not (tmp_path / "wheels").exists()  # refused before anything was downloaded
