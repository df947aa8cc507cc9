"""A job's output directory is attacker-controlled: the attacks of issue 26 replayed through real jobs, against the
DockerRunner (real engine, real image) and LocalRunner. Trust boundary: the job's output directory (the job's) ->
the results directory (the worker's, never mounted into the job) -> pages and GitHub."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from runners.protocol import Runner
from tests.runners.test_runner_contract import spec_for

SECRET = "BEGIN RSA PRIVATE KEY: the App's key, never to be shown"

PLANT = """
    import os, socket
    out = os.environ["COMPILE_CI_OUTPUT_DIR"]
    os.makedirs(os.path.join(out, "tests", "t1"))
    open(os.path.join(out, "tests", "t1", "output_code_0.py"), "w").write("# a kernel")
    for name, target in [("junit.xml", {secret!r}), ("environment.json", "/etc/passwd"),
                         ("meta.json", {victim!r}), ("tests/t1/repro.py", {secret!r}), ("tests/t2", "/")]:
        os.symlink(target, os.path.join(out, name))
    os.mkfifo(os.path.join(out, "tests", "t1", "metrics.json"))
    os.mkfifo(os.path.join(out, "progress.json"))
    socket.socket(socket.AF_UNIX).bind(os.path.join(out, "sock"))
    open(os.path.join(out, "log.txt"), "w").write("a log the job made up")
    open(os.path.join(out, "log.times"), "wb").write(b"\\xff" * 32)
    open(os.path.join(os.fsencode(out), b"bad\\xffname"), "w").write("a name that is not UTF-8")
    fd = os.open(out, os.O_RDONLY)
    for i in range(15):  # 15 folders of 252-byte names: within the depth limit, past PATH_MAX in the worker's tree
        name = "d" * 250 + "%02d" % i
        os.mkdir(name, dir_fd=fd)
        child = os.open(name, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(os.open("leaf.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    print("planted", flush=True)
"""


def _everything_in(directory: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in directory.rglob("*") if p.is_file() and not p.is_symlink())


def test_links_fifos_and_sockets_are_named_never_followed(runner: Runner, tmp_path: Path) -> None:
    secret, victim = tmp_path / "app-key.pem", tmp_path / "root-owned.conf"
    secret.write_text(SECRET)
    victim.write_text("original\n")
    started = time.monotonic()
    result = runner.run(spec_for(runner, tmp_path, PLANT.format(secret=str(secret), victim=str(victim))))
    assert result.exit_code == 0 and time.monotonic() - started < 60  # a FIFO made nobody wait
    out = tmp_path / "out"
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) == [
        "log.times", "log.txt", "tests/t1/output_code_0.py"]
    assert b"\xff" * 16 not in (out / "log.times").read_bytes()  # the worker's times, not the job's
    assert not any(p.is_symlink() or not (p.is_file() or p.is_dir()) for p in out.rglob("*"))
    assert SECRET not in _everything_in(out) and "root:" not in _everything_in(out)
    assert "planted" in (out / "log.txt").read_text() and "made up" not in (out / "log.txt").read_text()
    assert victim.read_text() == "original\n"
    expected = {
        "junit.xml": "a symbolic link", "environment.json": "a symbolic link", "meta.json": "a name the service "
        "writes itself", "tests/t1/repro.py": "a symbolic link", "tests/t2": "a symbolic link",
        "tests/t1/metrics.json": "a FIFO", "progress.json": "a FIFO", "sock": "a socket", "log.txt": "a name the "
        "service writes itself", "log.times": "a name the service writes itself",
        "bad\\xffname": "a name that is not a plain file name"}  # as pages show it: escaped, never raw bytes
    if runner.name == "docker":
        del expected["sock"]  # the engine's archive leaves sockets out altogether
    problems = {name: reason.split(" (")[0] for name, reason in result.output.problems}
    too_long = [name for name, reason in problems.items() if reason == "a path longer than 3072 bytes"]
    assert len(too_long) == 1 and too_long[0].endswith("…")  # named, cut for the page; not an infrastructure error
    del problems[too_long[0]]
    assert problems == expected


FILL = """
    import errno, os
    path = os.path.join(os.environ["COMPILE_CI_OUTPUT_DIR"], "big.bin")
    try:
        with open(path, "wb") as handle:
            for _ in range(64):
                handle.write(b"x" * (1 << 20))
                handle.flush()
        print("wrote 64 MB", flush=True)
    except OSError as exc:
        print("refused:", errno.errorcode.get(exc.errno), flush=True)
    open(os.path.join(os.environ["COMPILE_CI_OUTPUT_DIR"], "after.txt"), "w").write("small")
    {tail}
"""


def test_the_output_quota_holds_while_the_job_writes(runner: Runner, tmp_path: Path) -> None:
    # LocalRunner measures every few seconds, so its job keeps running a little while past the quota.
    spec = replace(spec_for(runner, tmp_path, FILL.format(tail="import time; time.sleep(8)")), output_mb=16)
    result = runner.run(spec)
    out = tmp_path / "out"
    kept = sum(p.stat().st_size for p in out.rglob("*") if p.is_file() and p.name != "log.txt")
    assert result.output.over_quota and kept <= 16 * 1024 * 1024
    if runner.name == "docker":  # the kernel refused the write inside the job: ENOSPC, no more
        assert "refused: ENOSPC" in (out / "log.txt").read_text() and result.exit_code == 0


def test_a_sparse_file_is_over_the_quota_and_ends_promptly(runner: Runner, tmp_path: Path) -> None:
    code = """
        import os
        with open(os.path.join(os.environ["COMPILE_CI_OUTPUT_DIR"], "sparse.bin"), "wb") as handle:
            handle.truncate(200 * 1024**3)
    """
    started = time.monotonic()
    result = runner.run(replace(spec_for(runner, tmp_path, code), output_mb=16))
    assert result.output.over_quota and time.monotonic() - started < 60
    assert not (tmp_path / "out" / "sparse.bin").exists()


def test_the_log_is_bounded(runner: Runner, tmp_path: Path) -> None:
    code = """
        for _ in range(4096):
            print('x' * 1023, flush=True)
        print("the end", flush=True)
    """
    assert runner.run(replace(spec_for(runner, tmp_path, code), log_mb=1)).exit_code == 0
    log = (tmp_path / "out" / "log.txt").read_text()
    assert len(log) < (1 << 20) + 4096 and "the log was cut at 1 MB" in log and "the end" not in log


def test_an_untrusted_jobs_cache_layer_is_capped_while_it_runs(runner: Runner, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The layer an untrusted job writes its compile cache into is on the worker's disk: past the cap the job is
    stopped with its own outcome, long before its time limit, and its writes go with the layer. However late the
    runner's watch first looks (a loaded host: 3 s here), what the job wrote at its start counts: the watch took the
    layer's measure after the job started, and a full run on this host once let the 12 MB below through."""
    from runners import layer_cap
    from runners.compile_cache import UNTRUSTED, CacheScope

    made = layer_cap.LayerWatch.__init__

    def slow(self: layer_cap.LayerWatch, *args: object, **kwargs: object) -> None:
        time.sleep(3)  # a loaded host's scheduling, made certain
        made(self, *args, **kwargs)

    monkeypatch.setattr(layer_cap.LayerWatch, "__init__", slow)

    code = """
        import os, time
        cache = os.environ["TORCHINDUCTOR_CACHE_DIR"]
        os.makedirs(cache, exist_ok=True)
        with open(os.path.join(cache, "flood.bin"), "wb") as handle:
            for _ in range(12):
                handle.write(os.urandom(1 << 20))
                handle.flush()
        print("wrote 12 MB", flush=True)
        time.sleep(50)
    """
    scope = CacheScope(tmp_path / "cache", "101", UNTRUSTED, pr=7, cap_mb=4)
    started = time.monotonic()
    result = runner.run(replace(spec_for(runner, tmp_path, code, timeout_s=90), cache=scope))
    assert result.cache_over_cap and not result.cancelled and time.monotonic() - started < 40, result
    assert "wrote 12 MB" in (tmp_path / "out" / "log.txt").read_text()
    assert not any(p.name == "flood.bin" for p in (tmp_path / "cache").rglob("*"))
