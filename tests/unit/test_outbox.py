"""Copying a job's output across the trust boundary (runners/outbox.py), from a directory and from the engine's tar
stream: regular files only, nothing followed, bounded; every refusal named. The runners' own attack tests replay the
same plantings through real jobs (tests/runners/test_output_trust.py)."""

from __future__ import annotations

import io
import os
import socket
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from runners.job_log import LogSink
from runners.outbox import Limits, OutputReport, collect_tar, collect_tree
from runners.untrusted_files import UntrustedFileError, is_folder, read_bounded, usage

SECRET = "-----BEGIN RSA PRIVATE KEY----- the App's key"


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "app-key.pem"
    path.write_text(SECRET)
    return path


def plant(job: Path, secret: Path) -> None:
    """What a hostile job leaves: links to host files and folders, a FIFO, a socket, names that are not names."""
    (job / "tests" / "t1").mkdir(parents=True)
    (job / "tests" / "t1" / "output_code_0.py").write_text("# kernel")
    (job / "junit.xml").symlink_to(secret)
    (job / "environment.json").symlink_to("/etc/passwd")
    (job / "tests" / "t2").symlink_to("/etc")
    (job / "tests" / "t1" / "repro.py").symlink_to(secret)
    os.mkfifo(job / "tests" / "t1" / "metrics.json")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(job / "sock"))
    (job / "log.txt").write_text("a log the job made up")
    (job / "log.times").write_bytes(b"\xff" * 32)  # times the job made up for the worker's log
    (job / "line\nbreak.txt").write_text("x")


def test_a_directory_copy_keeps_regular_files_and_names_the_rest(tmp_path: Path, secret: Path) -> None:
    job, dest = tmp_path / "job", tmp_path / "dest"
    job.mkdir()
    plant(job, secret)
    report = collect_tree(job, dest, Limits())
    kept = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if not p.is_dir())
    assert kept == ["tests/t1/output_code_0.py"]
    assert not any(p.is_symlink() for p in dest.rglob("*"))
    assert dict(report.problems) == {
        "junit.xml": "a symbolic link (not read)", "environment.json": "a symbolic link (not read)",
        "tests/t2": "a symbolic link (not read)", "tests/t1/repro.py": "a symbolic link (not read)",
        "tests/t1/metrics.json": "a FIFO (not read)", "sock": "a socket (not read)",
        "log.txt": "a name the service writes itself", "log.times": "a name the service writes itself",
        "line\\x0abreak.txt": "a name that is not a plain file name"}
    assert (report.files, report.problem_count, report.over_quota) == (1, 9, False)


def _tar(entries: list[tarfile.TarInfo], data: dict[str, bytes], top: str = "out") -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as archive:
        archive.addfile(_dir(top))
        for info in entries:
            archive.addfile(info, io.BytesIO(data[info.name]) if info.isreg() else None)
    return raw.getvalue()


def _dir(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    return info


def _file(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    return info


def _special(name: str, kind: bytes, target: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def chunks(data: bytes, size: int = 7000) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start:start + size]


def test_the_engines_archive_is_read_as_data(tmp_path: Path) -> None:
    entries = [_dir("out/tests"), _file("out/tests/code.py", 5), _special("out/junit.xml", tarfile.SYMTYPE, "/etc"),
               _special("out/fifo", tarfile.FIFOTYPE), _special("out/dev", tarfile.CHRTYPE),
               _special("out/hard", tarfile.LNKTYPE, "out/tests/code.py"), _file("out/../../escape.txt", 1),
               _file("out/meta.json", 2)]
    data = _tar(entries, {"out/tests/code.py": b"abcde", "out/../../escape.txt": b"x", "out/meta.json": b"{}"})
    report = collect_tar(chunks(data), tmp_path / "dest", Limits(), "out")
    assert (tmp_path / "dest" / "tests" / "code.py").read_bytes() == b"abcde"
    assert sorted(p.name for p in (tmp_path / "dest").rglob("*")) == ["code.py", "tests"]
    assert not (tmp_path / "escape.txt").exists()
    assert dict(report.problems) == {
        "junit.xml": "a symbolic link (not read)", "fifo": "a FIFO (not read)", "dev": "a device (not read)",
        "hard": "a hard link (not read)", "../../escape.txt": "a name that is not a plain file name",
        "meta.json": "a name the service writes itself"}


def test_quota_and_sparse_archives_stop_the_copy(tmp_path: Path) -> None:
    big = b"y" * 3000
    data = _tar([_file("out/a", 3000), _file("out/b", 3000)], {"out/a": big, "out/b": big})
    report = collect_tar(chunks(data), tmp_path / "quota", Limits(total_bytes=4000), "out")
    assert report.over_quota and report.files == 1 and dict(report.problems) == {"b": "past the output quota"}
    # A stream far longer than the quota (a sparse file archives whole) is cut off, not read to its end.
    endless = (b"\0" * 65536 for _ in range(10**9))
    head = _dir("out").tobuf() + _file("out/sparse", 10**12).tobuf()
    report = collect_tar(iter([head, *[next(endless) for _ in range(100)]]), tmp_path / "sparse",
                         Limits(total_bytes=1 << 20, files=10), "out")
    assert report.over_quota and report.files == 0


def test_too_many_and_too_deep_entries_are_refused(tmp_path: Path) -> None:
    job = tmp_path / "job"
    deep = job / "/".join(f"d{i}" for i in range(20))
    deep.mkdir(parents=True)
    (deep / "f.txt").write_text("deep")
    for i in range(30):
        (job / f"f{i:02}.txt").write_text("x")
    report = collect_tree(job, tmp_path / "dest", Limits(files=25, depth=16))
    assert report.over_quota and report.files <= 25
    assert any("nested deeper" in reason or "more than 25 entries" in reason for _name, reason in report.problems)


def test_undecodable_and_overlong_names_are_the_jobs_problem_not_the_workers(tmp_path: Path) -> None:
    """A name that is not UTF-8, or folders of 255-byte names nested past PATH_MAX (within the depth limit), were
    exceptions in the copy, reported as an infrastructure error; they are refusals now, and the rest is kept."""
    job = tmp_path / "job"
    job.mkdir()
    (job / os.fsdecode(b"bad\xffname.txt")).write_text("x")
    long_dirs = [("d" * 250) + f"{i:02}" for i in range(15)]
    fd = os.open(job, os.O_RDONLY)
    try:  # the deep path is built relative to each folder: the kernel refuses a single path this long
        for name in long_dirs:
            os.mkdir(name, dir_fd=fd)
            child = os.open(name, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = child
        with open(os.open("leaf.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as handle:
            handle.write("deep")
    finally:
        os.close(fd)
    (job / "kept.txt").write_text("kept")
    report = collect_tree(job, tmp_path / "dest", Limits())
    reasons = dict(report.problems)
    assert reasons["bad\\xffname.txt"] == "a name that is not a plain file name"  # shown escaped, never raw
    assert "a path longer than 3072 bytes" in reasons.values()
    assert (tmp_path / "dest" / "kept.txt").read_text() == "kept"
    # The same names through the engine's archive.
    deep = "out/" + "/".join(long_dirs) + "/leaf.txt"
    odd = os.fsdecode(b"out/bad\xffname.txt")
    data = _tar([_file(odd, 1), _file(deep, 4), _file("out/kept.txt", 4)],
                {odd: b"x", deep: b"deep", "out/kept.txt": b"kept"})
    report = collect_tar(chunks(data), tmp_path / "tar", Limits(), "out")
    assert sorted(dict(report.problems).values()) == ["a name that is not a plain file name",
                                                      "a path longer than 3072 bytes"]
    assert (tmp_path / "tar" / "kept.txt").read_text() == "kept"


def test_a_sparse_file_on_disk_is_not_read(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    with open(job / "sparse", "wb") as handle:
        handle.truncate(100 * 1024**3)  # 100 GB that take no space
    assert usage(job, 1 << 30) < 1 << 20  # the quota check counts blocks, not the size it claims
    report = collect_tree(job, tmp_path / "dest", Limits(total_bytes=1 << 20))
    assert report.over_quota and report.files == 0


def test_reading_an_artifact_never_follows_a_link_or_blocks(tmp_path: Path, secret: Path) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "link").symlink_to(secret)
    (tmp_path / "dir" / "sub").symlink_to(tmp_path)
    os.mkfifo(tmp_path / "dir" / "fifo")
    (tmp_path / "dir" / "big").write_bytes(b"z" * 100)
    for relative, reason in (("link", "a symbolic link"), ("fifo", "a FIFO"), ("sub/app-key.pem", "a symbolic link"),
                             ("../app-key.pem", "not a path inside the directory")):
        with pytest.raises(UntrustedFileError, match=reason):
            read_bounded(tmp_path / "dir", relative, 1000)
    with pytest.raises(UntrustedFileError, match="limit"):
        read_bounded(tmp_path / "dir", "big", 99)


def test_the_log_is_cut_at_its_cap(tmp_path: Path) -> None:
    with LogSink(tmp_path / "log.txt", limit=100) as log:
        for _ in range(50):
            log.write(b"0123456789")
    text = (tmp_path / "log.txt").read_text()
    assert text.startswith("0123456789" * 10) and "the log was cut at" in text and len(text) < 200


def test_an_empty_report_is_clean() -> None:
    assert OutputReport() == OutputReport(0, 0, [], 0, False)


def test_a_test_folder_behind_a_linked_tests_folder_is_not_a_test_folder(tmp_path: Path, secret: Path) -> None:
    """An older attempt (before the copy-out) could hold `tests` as a link to anywhere: the base diff and the
    history chart, which read a test's folder by name, see no folder there rather than following it."""
    from service.web.browser.base_lookup import BaseSide

    elsewhere = tmp_path / "elsewhere" / "t1"
    elsewhere.mkdir(parents=True)
    (elsewhere / "metrics.json").write_text('{"compile_time_s": 1.0}')
    linked, plain = tmp_path / "linked", tmp_path / "plain"
    linked.mkdir()
    (linked / "tests").symlink_to(tmp_path / "elsewhere")
    (plain / "tests" / "t1").mkdir(parents=True)
    assert not is_folder(linked, "tests/t1") and is_folder(plain, "tests/t1")
    assert BaseSide(None, None, linked, "").test_folder("t1") is None
    assert BaseSide(None, None, plain, "").test_folder("t1") == plain / "tests" / "t1"
