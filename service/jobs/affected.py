"""Run what a change can affect: on a pull request, the declared targets (`[targets] models`, `fuse`) whose import
closure its diff does not touch are not run; their tests take the base's results ("not affected, base result").

Everything runs when the change touches what every test compiles under (the compiler surface): the config, an
install file (torch pins and other requirements), a conftest.py, a file of a declared pass's closure, or a Python
file, before or after the change, that reaches into torch's compiler or global state (`torch._inductor`,
`torch._dynamo`, `torch.library`, `torch.backends`, `torch.set_*`, ...: a patch works on every test of the job, not
only on its own target's). When unsure (a file that is not Python and not documentation, an import by computed
name, a checkout too large to index), it runs. Pushes, base runs and pull requests without a usable base run all.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from runners.untrusted_files import read_bounded
from service.jobs.context import WorkerContext
from service.jobs.import_closure import MAX_SOURCE_BYTES, Closure, ModuleIndex, TooLarge, closure, module_name
from service.store import Job, Run, job_id_for

TARGET_KINDS = ("models", "fuse")  # declared targets whose tests are parametrized by them (suites/sharding.py)
PASS_KINDS = ("pre_grad_passes", "post_grad_passes", "joint_passes")  # run under every compile: the surface
SURFACE_FILES = (".compile-ci.toml", "conftest.py", "pyproject.toml", "setup.py", "setup.cfg", "sitecustomize.py",
                 "usercustomize.py", "requirements*.txt", "requirements*.in", "constraints*.txt", "*.pth",
                 "pytest.ini", "tox.ini", "MANIFEST.in")
DOCUMENTATION = ("*.md", "*.rst", "LICENSE*", "COPYING*", "AUTHORS*", "CHANGELOG*", "NOTICE*", ".gitignore",
                 ".gitattributes", "docs/*", "doc/*", ".github/*")
# What a patch or a global switch looks like in Python source; a changed file holding any of these affects every test.
COMPILER_SURFACE = re.compile(
    rb"torch\s*\.\s*_|torch\.library|torch\.backends|torch\.set_|torch\.use_deterministic|torch\.fx|torch\.compiler"
    rb"|torch\.ops|torch\.utils\._|from\s+torch\s+import\s+_|register_(lowering|decomposition|replacement|graph_pattern)"
    rb"|make_fallback|cache_key_tag|os\.environ|sys\.modules|setattr\(\s*torch|builtins")
MAX_CHANGED = 5000


@dataclass(frozen=True)
class Decision:
    """The declared targets whose tests are not run (empty: all run), and why, for the job's log."""

    not_affected: tuple[str, ...] = ()
    reason: str = ""
    changed: tuple[str, ...] | None = None  # the paths the pull request changed, when they were read

    @property
    def line(self) -> str:
        if self.not_affected:
            return (f"compile-ci: not affected by this change, so not run (their tests take the base's results): "
                    f"{', '.join(self.not_affected)}. {self.reason}\n")
        return f"compile-ci: every test runs: {self.reason}\n" if self.reason else ""


def everything(reason: str) -> Decision:
    return Decision((), reason)


def _matches(path: str, patterns: Sequence[str]) -> bool:
    name = path.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(path, p) for p in patterns)


def decide(changed: Sequence[str], targets: Mapping[str, Sequence[str]], index: ModuleIndex,
           read_head: Callable[[str], bytes | None], read_base: Callable[[str], bytes | None]) -> Decision:
    """Pure given its readers: the checkout's files at the head, and a changed file's bytes at the base."""
    specs = sorted({spec for kind in TARGET_KINDS for spec in targets.get(kind, ())})
    if not specs:
        return everything("no declared models or fuse targets to leave out")
    if len(changed) > MAX_CHANGED:
        return everything(f"the change touches more than {MAX_CHANGED} files")
    for path in changed:
        if _matches(path, SURFACE_FILES):
            return everything(f"the change touches {path} (configuration, install or conftest: the compiler surface)")
        if not path.endswith(".py") and not _matches(path, DOCUMENTATION):
            return everything(f"the change touches {path}, which is not Python: what reads it cannot be told")
        if path.endswith(".py") and any(COMPILER_SURFACE.search(text or b"") for text in (read_head(path),
                                                                                        read_base(path))):
            return everything(f"the change touches {path}, which reaches into torch's compiler or global state")
    python = {p for p in changed if p.endswith(".py")}
    changed_names = {name for name in map(module_name, python) if name}

    def touched(reach: Closure) -> str | None:
        hit = sorted((reach.files & python) | {p for p in python if module_name(p) in reach.names})
        if hit:
            return hit[0]
        return reach.dynamic[0] if reach.dynamic and changed_names else None

    for spec in sorted({spec for kind in PASS_KINDS for spec in targets.get(kind, ())}):
        hit = touched(closure(index, spec.partition(":")[0], read_head))
        if hit:
            return everything(f"the change touches {hit}, in the imports of the declared pass {spec}")
    unaffected = [spec for spec in specs if touched(closure(index, spec.partition(":")[0], read_head)) is None]
    if not unaffected:
        return everything("the change touches the imports of every declared target")
    ran = len(specs) - len(unaffected)
    return Decision(tuple(unaffected), f"{ran} of {len(specs)} declared targets import what it changed.")


def decide_for_checkout(checkout: Path, changed: Sequence[str], targets: Mapping[str, Sequence[str]],
                        read_base: Callable[[str], bytes | None]) -> Decision:
    try:
        index = ModuleIndex.of_checkout(checkout)
    except (TooLarge, OSError) as exc:
        return everything(f"the checkout was not analysed ({exc})")

    def read_head(path: str) -> bytes | None:
        try:  # the pull request's files: no link followed, on any component; a larger one is unsure (None)
            return read_bounded(checkout, path, MAX_SOURCE_BYTES)
        except (OSError, ValueError):
            return None

    return decide(changed, targets, index, read_head, read_base)


NULL_SHA = "0" * 40


def decide_for_job(ctx: WorkerContext, run: Run, job: Job, targets: Mapping[str, Sequence[str]], mirror: Path,
                   checkout: Path) -> Decision:
    """A pull request's job with a base job to take results from: the diff against its base, decided. Anything
    else runs everything; so does a failure to read the diff (said in the log)."""
    if run.trigger != "pull_request" or job.suite == "repo":
        return Decision()
    base_job = (ctx.store.get_job(job_id_for(run.base_run_id, job.suite, job.device, job.torch)) if run.base_run_id
                else None)
    if not run.base_sha or run.base_sha == NULL_SHA or base_job is None:
        return everything("this pull request has no base job to take results from")
    if base_job.state == "completed" and base_job.conclusion not in ("success", "failure"):
        return everything(f"its base job ended without test results ({base_job.title})")
    try:
        ctx.fetch_commit(run, run.base_sha)
        changed = ctx.checkout.changed_paths(mirror, run.base_sha, run.head_sha)
    except Exception as exc:  # noqa: BLE001 - unsure is not an error: the job runs everything
        return everything(f"the diff against the base could not be read ({type(exc).__name__})")

    def read_base(path: str) -> bytes | None:
        text = ctx.checkout.read_file(mirror, run.base_sha, path)
        return text.encode() if text is not None else None

    try:
        decision = decide_for_checkout(checkout, changed, targets, read_base)
    except Exception as exc:  # noqa: BLE001 - whatever the pull request's files hold, the job runs, whole
        decision = everything(f"the change was not analysed ({type(exc).__name__})")
    return replace(decision, changed=tuple(changed))


CHANGED_FILES_ENV = "COMPILE_CI_CHANGED_FILES"  # suites/ops/aim.py reads it
MAX_CHANGED_ENV_BYTES = 100_000  # an environment variable's value may not pass 128 KiB


def changed_files_env(suite: str, changed: tuple[str, ...] | None) -> dict[str, str]:
    """The ops sweep aims at the repository's compiler patches whose code this pull request changed: it gets the
    changed paths. Nothing (every patch counts) without a list, when the change touches an install or config file
    (what the job imports may differ anywhere) or when the list is too long for the environment."""
    if suite != "ops" or changed is None or any(_matches(path, SURFACE_FILES) for path in changed):
        return {}
    text = json.dumps(list(changed))
    return {CHANGED_FILES_ENV: text} if len(text.encode()) <= MAX_CHANGED_ENV_BYTES else {}
