"""A job's fixed cost, cut without changing what a job computes (docs/benchmarks.md, "a job's fixed cost").

Inductor's source keys come from the trusted side (the image's build, the LocalRunner's worker): the same value torch
computes, used only for the torch it was computed for, and out of any job's reach. The job's process ends without
the interpreter's finalization, yet its threads, atexit handlers and exit status are what a normal exit gives."""

from __future__ import annotations

import base64
import json
import os
import types
from pathlib import Path

from runners.protocol import Runner, RunSpec
from suites import source_keys

ROOT = Path(__file__).resolve().parents[2]
KEYS_TEST = '''
import base64, json, os, subprocess, sys

OWN = ("import base64; from torch._inductor import codecache; "
       "print(base64.b64encode(codecache.torch_key()).decode())")


def test_keys():
    import torch
    from torch._inductor import codecache

    # A child started without the job's entry computes the key as torch does, from torch's files.
    own = subprocess.run([sys.executable, "-c", OWN], capture_output=True, text=True, check=True,
                         env={k: v for k, v in os.environ.items() if k != "COMPILE_CI_SOURCE_KEYS"}).stdout.strip()
    image_file = "/opt/compile-ci/source_keys.json"
    image = open(image_file).read() if os.path.exists(image_file) else ""
    try:
        open(image_file, "a").close()
        writable = True
    except OSError:
        writable = False
    with open(os.path.join(os.environ["COMPILE_CI_OUTPUT_DIR"], "keys.json"), "w") as handle:
        json.dump({"job": base64.b64encode(codecache.torch_key()).decode(), "own": own, "image": image,
                   "image_writable": writable, "version": torch.__version__,
                   "dir": os.path.dirname(os.path.realpath(torch.__file__))}, handle)
'''


def _job(runner: Runner, tmp_path: Path, name: str, test: str, env: dict[str, str] | None = None) -> tuple[int, Path]:
    checkout = tmp_path / f"{name}-src"
    checkout.mkdir()
    (checkout / "test_job.py").write_text(test)
    out = tmp_path / f"{name}-out"
    spec = RunSpec(job_id=f"startup-{name}", checkout_dir=checkout, output_dir=out, timeout_s=300,
                   command=(runner.python, "-m", "suites.pytest_entry", "-q", "-p", "no:cacheprovider", "-p",
                            "suites.plugin", str(checkout / "test_job.py")),
                   env={"COMPILE_CI_OUTPUT_DIR": str(out), "COMPILE_CI_CHECKOUT": str(checkout), **(env or {})},
                   suites_dir=ROOT / "suites")
    result = runner.run(spec)
    assert result.exit_code is not None, result.infra_error
    return result.exit_code, out


def test_a_job_is_handed_the_source_keys_torch_computes(runner: Runner, tmp_path: Path) -> None:
    code, out = _job(runner, tmp_path, "keys", KEYS_TEST)
    assert code == 0, (out / "log.txt").read_text()[-3000:]
    keys = json.loads((out / "keys.json").read_text())
    assert keys["job"] == keys["own"]  # exact: what inductor would have computed itself
    if runner.name == "docker":
        # Computed by the image's build for this very torch, in a file no job can change.
        image = json.loads(keys["image"])
        assert (image["torch_key"], image["torch_version"], image["torch_dir"]) == (keys["own"], keys["version"],
                                                                                     keys["dir"])
        assert keys["image_writable"] is False


def test_a_job_uses_the_handed_keys(local_runner: Runner, tmp_path: Path) -> None:
    """Really used: a made-up key shows through in the job."""
    import torch

    made_up = "QUJD" * 11
    ours = {"torch_version": torch.__version__, "torch_dir": os.path.dirname(os.path.realpath(torch.__file__)),
            "torch_key": made_up, "triton_key": None}
    code, out = _job(local_runner, tmp_path, "used", KEYS_TEST, {"COMPILE_CI_SOURCE_KEYS": json.dumps(ours)})
    assert code == 0 and json.loads((out / "keys.json").read_text())["job"] == made_up


def _codecache() -> types.SimpleNamespace:
    """What apply() seeds, as inductor defines it: a fresh pair of torch's own prefetchable caches."""
    from torch.utils._functools import prefetchable_cache

    return types.SimpleNamespace(torch_key=prefetchable_cache(lambda: b"computed by torch"),
                                 triton_key=prefetchable_cache(lambda: "computed by triton"))


def test_handed_keys_apply_only_to_their_torch() -> None:
    import torch

    ours = {"torch_version": torch.__version__, "torch_dir": os.path.dirname(os.path.realpath(torch.__file__)),
            "torch_key": base64.b64encode(b"precomputed").decode(), "triton_key": "triton precomputed"}
    codecache = _codecache()
    assert source_keys.apply(ours, codecache)
    assert (codecache.torch_key(), codecache.triton_key()) == (b"precomputed", "triton precomputed")
    for other in ({**ours, "torch_version": "2.0.0"}, {**ours, "torch_dir": "/elsewhere/torch"},
                  {**ours, "torch_key": "not base64!"}, {**ours, "torch_key": 7}, {}):
        codecache = _codecache()
        assert not source_keys.apply(other, codecache)
        assert codecache.torch_key() == b"computed by torch", other
    codecache = _codecache()
    codecache.torch_key()  # already computed (inductor asked first): torch's own value stands
    assert not source_keys.apply(ours, codecache) and codecache.torch_key() == b"computed by torch"


EXIT_TEST = '''
import atexit, os, threading, time

OUT = os.environ["COMPILE_CI_OUTPUT_DIR"]


def _late():
    time.sleep(1.0)
    open(os.path.join(OUT, "thread.txt"), "w").write("joined")


def test_leaves_work_behind():
    atexit.register(lambda: open(os.path.join(OUT, "atexit.txt"), "w").write("ran"))
    threading.Thread(target=_late).start()  # not a daemon: a normal exit waits for it
    print("buffered to the end", end="")


def test_fails():
    assert False, "a failing test: the exit status must say so"
'''


def test_a_job_ends_as_a_normal_exit_would(runner: Runner, tmp_path: Path) -> None:
    """Exit status 0 is every other job's; here pytest's 1 for a failed test, and what the job left running."""
    code, out = _job(runner, tmp_path, "exit", EXIT_TEST)
    assert code == 1
    assert (out / "thread.txt").read_text() == "joined"
    assert (out / "atexit.txt").read_text() == "ran"
    assert "1 failed, 1 passed" in (out / "log.txt").read_text()


POOL_TEST = '''
from concurrent.futures import ThreadPoolExecutor

POOL = ThreadPoolExecutor(2)  # idle workers at exit, as inductor's compile pools leave them


def test_uses_a_pool():
    assert POOL.submit(lambda: 41 + 1).result() == 42
'''


def test_a_job_with_idle_pool_threads_ends(local_runner: Runner, tmp_path: Path) -> None:
    """A ThreadPoolExecutor's idle workers are non-daemon threads that stop only when told at exit: a job that
    joined them without telling them hung until its time limit."""
    code, out = _job(local_runner, tmp_path, "pool", POOL_TEST)
    assert code == 0 and "1 passed" in (out / "log.txt").read_text()


HEADER_JOB = '''
import json, os, pathlib, sys
import torch
from torch._inductor.runtime.cache_dir_utils import default_cache_dir

cache = pathlib.Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]).parent.resolve()
def headers():
    return {str(p.relative_to(cache)): p.stat().st_mtime_ns for p in cache.rglob("*.gch")}
before = headers()
torch.compile(lambda x: (x.sin() * 3).relu() + 1)(torch.randn(16))
json.dump({"default_dir_in_cache": pathlib.Path(default_cache_dir()).resolve() == cache, "before": before,
           "after": headers()}, open(sys.argv[1], "w"))
'''


def test_local_jobs_keep_inductors_precompiled_header_in_their_cache(local_runner: Runner, tmp_path: Path) -> None:
    """Inductor puts its precompiled header under $TMPDIR/torchinductor_<user>, whatever TORCHINDUCTOR_CACHE_DIR
    says: in a LocalRunner job's own TMPDIR, thrown away after it, every job rebuilt it (about 20 s of its first
    compile on a GPU host). Now it lives in the job's cache: kept by a trusted job, reused by the next job."""
    from runners.compile_cache import TRUSTED, UNTRUSTED, CacheScope, RepoCache

    reports = []
    for n, (trust, pr) in enumerate(((TRUSTED, None), (UNTRUSTED, 4))):
        out = tmp_path / f"out-{n}"
        spec = RunSpec(job_id=f"header-{n}", command=(local_runner.python, "-c", HEADER_JOB, str(out / "r.json")),
                       checkout_dir=tmp_path, output_dir=out, timeout_s=600,
                       cache=CacheScope(tmp_path / "cache", "7", trust, pr))
        result = local_runner.run(spec)
        assert result.exit_code == 0, spec.log_path.read_text()[-3000:]
        reports.append(json.loads((out / "r.json").read_text()))
    trusted = RepoCache.of(CacheScope(tmp_path / "cache", "7", TRUSTED), local_runner.cache_key("cpu")).trusted_dir
    assert all(report["default_dir_in_cache"] for report in reports)
    assert list(trusted.rglob("*.gch")), "the trusted job's precompiled header stays in the repository's cache"
    assert reports[1]["before"] and reports[1]["after"] == reports[1]["before"], "the next job rebuilt it"


DEFAULT_DIR_JOB = '''
import os, pathlib
from torch._inductor.runtime.cache_dir_utils import default_cache_dir

cache = pathlib.Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]).parent.resolve()
print("default dir in cache:", pathlib.Path(default_cache_dir()).resolve() == cache)
'''


def test_a_local_jobs_inductor_state_lives_in_its_cache(local_runner: Runner, tmp_path: Path) -> None:
    """The cheap proof of the test above (heavy: two compiles): inductor's own default directory, where it keeps
    its precompiled headers, is the job's cache directory, not its throwaway TMPDIR."""
    from runners.compile_cache import UNTRUSTED, CacheScope

    spec = RunSpec(job_id="default-dir", command=(local_runner.python, "-c", DEFAULT_DIR_JOB), checkout_dir=tmp_path,
                   output_dir=tmp_path / "out", timeout_s=300, cache=CacheScope(tmp_path / "cache", "7", UNTRUSTED, 1))
    assert local_runner.run(spec).exit_code == 0
    assert "default dir in cache: True" in spec.log_path.read_text()
