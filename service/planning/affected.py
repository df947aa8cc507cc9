"""Which tests' results a change leaves as they were (pure): the groups of tests whose inputs it cannot reach, so that
their results are reused from the job the change is measured against (service/planning/reuse_plan.py says which).

Groups: each declared target of `[targets] models` and `fuse` (its tests are parametrized by it), whose own inputs are
its spec and its import closure; and the built-in corpus (tests of no declared target), whose closure is the compiler
surface only. `.compile-ci.toml` is read key by key: adding, removing or changing one of those targets affects that
target only; any other key (`[install]`, `[suites]`, `[budgets]`, declared passes, ...) reaches every test.

Every test runs when the change touches what every test compiles under (the compiler surface): an install file
(torch pins and other requirements), a conftest.py, a file of a declared pass's closure, or a Python file, before or
after the change, that reaches into torch's compiler or global state (`torch._inductor`, `torch._dynamo`,
`torch.library`, `torch.backends`, `torch.set_*`, ...: a patch works on every test of the job, not only on its own
target's). When unsure (a file that is not Python and not documentation, an import by computed name, a checkout too
large to index), it runs. This static answer is checked at run time: the job's compiler fingerprint must equal the
one recorded with the reused results (service/planning/reuse_check.py), or they run after all.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from runners.untrusted_files import read_bounded
from service.planning.import_closure import MAX_SOURCE_BYTES, Closure, ModuleIndex, TooLarge, closure, module_name
from service.planning.reuse_keys import config_differences, group_specs
from service.repo_config import CONFIG_FILE, RepoConfig
from suites.shard_plan import CORPUS_GROUP

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
IMPORTABLE = (".py", ".pyc", ".pyd", ".so", ".pyi")


@dataclass(frozen=True)
class Decision:
    """The groups whose results are reused, not run (empty: all run), and why, for the job's log."""

    not_affected: tuple[str, ...] = ()  # CORPUS_GROUP and declared target specs
    reason: str = ""
    changed: tuple[str, ...] | None = None  # the paths changed since the source, when they were read

    @property
    def line(self) -> str:
        if self.not_affected:
            return (f"compile-ci: nothing these tests depend on changed, so their results are reused, not run: "
                    f"{', '.join(self.not_affected)}. {self.reason}\n")
        return f"compile-ci: every test runs: {self.reason}\n" if self.reason else ""


def everything(reason: str, changed: tuple[str, ...] | None = None) -> Decision:
    return Decision((), reason, changed)


def _matches(path: str, patterns: Sequence[str]) -> bool:
    name = path.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(path, p) for p in patterns)


def only_documentation(changed: Sequence[str]) -> bool:
    """Whether every changed path is documentation (what no test imports, installs or is configured by): a Python
    file or extension module is never, wherever it sits (`docs/conf.py` can be imported)."""
    return all(path != CONFIG_FILE and _matches(path, DOCUMENTATION) and not _matches(path, SURFACE_FILES)
               and not path.endswith(IMPORTABLE) for path in changed)


def decide(changed: Sequence[str], head: RepoConfig, source: RepoConfig, index: ModuleIndex,
           read_head: Callable[[str], bytes | None], read_base: Callable[[str], bytes | None]) -> Decision:
    """Pure given its readers: the checkout's files at the head, and a changed file's bytes at the source. `head`,
    `source`: the configs the two jobs run with."""
    if len(changed) > MAX_CHANGED:
        return everything(f"the change touches more than {MAX_CHANGED} files")
    differ = config_differences(head, source)
    if differ:
        return everything(f"the change to {CONFIG_FILE} reaches every test ({', '.join(differ)})")
    for path in changed:
        if path == CONFIG_FILE:
            continue  # read key by key, above and per target below
        if _matches(path, SURFACE_FILES):
            return everything(f"the change touches {path} (install or conftest: the compiler surface)")
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

    for spec in sorted({spec for kind in PASS_KINDS for spec in head.targets.get(kind, ())}):
        hit = touched(closure(index, spec.partition(":")[0], read_head))
        if hit:
            return everything(f"the change touches {hit}, in the imports of the declared pass {spec}")
    mine, theirs = group_specs(head), group_specs(source)
    reused = [spec for spec, kinds in mine.items() if theirs.get(spec) == kinds
              and touched(closure(index, spec.partition(":")[0], read_head)) is None]
    ran = len(mine) - len(reused)
    said = (f"{ran} of {len(mine)} declared targets are new, changed or import what it changed." if ran else
            "It does not reach the compiler, nor any declared target." if mine else "It does not reach the compiler.")
    return Decision((CORPUS_GROUP, *reused), said)


def decide_for_checkout(checkout: Path, changed: Sequence[str], head: RepoConfig, source: RepoConfig,
                        read_base: Callable[[str], bytes | None]) -> Decision:
    try:
        index = ModuleIndex.of_checkout(checkout)
    except (TooLarge, OSError) as exc:
        return everything(f"the checkout was not analysed ({exc})")
    return decide(changed, head, source, index, checkout_reader(checkout), read_base)


def checkout_reader(checkout: Path) -> Callable[[str], bytes | None]:
    def read_head(path: str) -> bytes | None:
        try:  # the pull request's files: no link followed, on any component; a larger one is unsure (None)
            return read_bounded(checkout, path, MAX_SOURCE_BYTES)
        except (OSError, ValueError):
            return None

    return read_head


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
