"""The repository's `.compile-ci.toml`: parsed and validated into a RepoConfig, or a ConfigProblem."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from typing import Any

from service.compare.budgets import BUDGET_KEYS, Budgets, parse_budgets
from service.torch_versions import NAME as TORCH_NAME

CONFIG_FILE = ".compile-ci.toml"
DEVICES = ("cpu", "cuda")
TARGET_KINDS = ("models", "post_grad_passes", "pre_grad_passes", "joint_passes", "fuse", "compiler")
# Built-in suites that run only when asked for in [suites] run, or, for `ops` (the OpInfo sweep), when the repository
# declares a compiler of its own ([targets] compiler): a repository of models would only re-test stock torch there.
OPT_IN_SUITES = {"ops": "compiler"}
DEFAULT_TIMEOUT_MINUTES = 30
# Every table and key a .compile-ci.toml may hold (anything else is an error naming the line); docs/configuring.md
# documents each as `table.key` (tests/unit/test_docs_reference.py keeps it so).
CONFIG_KEYS: dict[str, tuple[str, ...]] = {
    "install": ("requirements", "package"),
    "targets": TARGET_KINDS,
    "suites": ("run", "devices", "repo_tests", "timeout_minutes", "flaky_reruns", "torch"),
    "budgets": BUDGET_KEYS,
    "comment": ("always",),
    "canary": ("enabled",),
}
DEFAULT_FLAKY_RERUNS = 2
MAX_FLAKY_RERUNS = 5
# A requirement is a name, optional extras and version specifiers: nothing else. URLs, paths and pip options
# (`--index-url`, `-f`, `-e`, `--trusted-host`...) would let a pull request choose where code comes from;
# only the deployment's indexes are used.
_VERSION = r"(===|==|!=|<=|>=|~=|<|>)\s*[A-Za-z0-9.*+!_-]+"
_REQUIREMENT = re.compile(
    rf"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?(?:\[[A-Za-z0-9._-]+(?:\s*,\s*[A-Za-z0-9._-]+)*\])?"
    rf"\s*(?:{_VERSION}(?:\s*,\s*{_VERSION})*)?"
)
# The runner image provides these; a second copy would shadow the torch under test.
IMAGE_PACKAGES = ("torch", "pytest")


@dataclass(frozen=True)
class RepoConfig:
    suites: tuple[str, ...]
    devices: tuple[str, ...]
    requirements: tuple[str, ...] = ()
    install_package: bool = True  # the checkout itself, as `pip install -e .` (when it has a pyproject/setup.py)
    targets: dict[str, list[str]] = field(default_factory=dict)
    repo_tests: tuple[str, ...] = ()
    timeout_minutes: int = DEFAULT_TIMEOUT_MINUTES
    flaky_reruns: int = DEFAULT_FLAKY_RERUNS  # in-job re-runs of a failing test (COMPILE_CI_RERUNS)
    budgets: Budgets = field(default_factory=lambda: Budgets())
    comment_always: bool = False  # the sticky pull-request comment even when all is green and nothing changed
    torch: tuple[str, ...] = ()  # [suites] torch: the deployment's versions to run on (empty: its default only)
    canary: bool = True  # [canary] enabled: the daily run of the default branch on the advisory torch


@dataclass(frozen=True)
class ConfigProblem:
    line: int | None
    message: str

    def render(self) -> str:
        where = f"{CONFIG_FILE}:{self.line}" if self.line else CONFIG_FILE
        return f"{where}: {self.message}"


def default_suites(builtin_suites: tuple[str, ...], targets: dict[str, list[str]] | None = None) -> tuple[str, ...]:
    """The suites a config that names none runs: every built-in one but the opt-in ones whose target is not declared."""
    return tuple(s for s in builtin_suites if s not in OPT_IN_SUITES or (targets or {}).get(OPT_IN_SUITES[s]))


def default_config(builtin_suites: tuple[str, ...]) -> RepoConfig:
    return RepoConfig(suites=default_suites(builtin_suites), devices=DEVICES)


def parse_repo_config(text: str | None, builtin_suites: tuple[str, ...],
                      torch_versions: tuple[str, ...] | None = None) -> RepoConfig | list[ConfigProblem]:
    """Pure: the file's text (None when absent) -> a config, or every problem found in it. `torch_versions`: the
    deployment's (COMPILE_CI_TORCH_VERSIONS), which `[suites] torch` must choose from; None checks only the form."""
    if text is None:
        return default_config(builtin_suites)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        match = re.search(r"\(at line (\d+), column \d+\)", str(exc))
        message = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(exc))
        return [ConfigProblem(int(match.group(1)) if match else None, f"invalid TOML: {message}")]
    problems: list[ConfigProblem] = []
    checker = _Checker(text, problems)
    checker.unknown_keys("", data, tuple(CONFIG_KEYS))
    install = checker.table(data, "install")
    targets = checker.table(data, "targets")
    suites = checker.table(data, "suites")
    budget_table = checker.table(data, "budgets")
    comment = checker.table(data, "comment")
    canary = checker.table(data, "canary")
    for section, table in (("install", install), ("targets", targets), ("suites", suites), ("canary", canary),
                           ("budgets", budget_table), ("comment", comment)):
        checker.unknown_keys(section, table, CONFIG_KEYS[section])
    budgets, budget_problems = parse_budgets(budget_table)
    for key, message in budget_problems:
        checker.problem("budgets", key, message)
    reruns = suites.get("flaky_reruns", DEFAULT_FLAKY_RERUNS)
    if not isinstance(reruns, int) or isinstance(reruns, bool) or not 0 <= reruns <= MAX_FLAKY_RERUNS:
        checker.problem("suites", "flaky_reruns", f"must be an integer from 0 to {MAX_FLAKY_RERUNS}, got {reruns!r}")
    always = comment.get("always", False)
    if not isinstance(always, bool):
        checker.problem("comment", "always", f"must be true or false, got {always!r}")
    canary_on = canary.get("enabled", True)
    if not isinstance(canary_on, bool):
        checker.problem("canary", "enabled", f"must be true or false, got {canary_on!r}")
    torch = checker.strings("suites", suites, "torch", [], allowed=torch_versions)
    for version in torch:
        if torch_versions is None and not re.fullmatch(TORCH_NAME, version):
            checker.problem("suites", "torch", f"{version!r} is not a torch version of the form major.minor")
    allowed_suites = (*builtin_suites, "repo")
    repo_tests = checker.strings("suites", suites, "repo_tests", [])
    target_lists = {kind: checker.strings("targets", targets, kind, [], spec=True) for kind in TARGET_KINDS}
    default_run = list(default_suites(builtin_suites, target_lists)) + (["repo"] if repo_tests else [])
    run = checker.strings("suites", suites, "run", default_run, allowed=allowed_suites)
    devices = checker.strings("suites", suites, "devices", list(DEVICES), allowed=DEVICES)
    timeout = suites.get("timeout_minutes", DEFAULT_TIMEOUT_MINUTES)
    if not isinstance(timeout, int) or isinstance(timeout, bool) or not 1 <= timeout <= 24 * 60:
        checker.problem("suites", "timeout_minutes", f"must be an integer from 1 to 1440, got {timeout!r}")
    if "repo" in run and not repo_tests:
        checker.problem("suites", "run", "the 'repo' suite needs [suites] repo_tests (paths of your pytest tests)")
    requirements = checker.strings("install", install, "requirements", [])
    for requirement in requirements:
        problem = requirement_problem(requirement)
        if problem:
            checker.problem("install", "requirements", problem)
    package = install.get("package", True)
    if not isinstance(package, bool):
        checker.problem("install", "package", f"must be true or false, got {package!r}")
    for key, values in (("run", run), ("devices", devices), ("torch", torch)):
        if key in suites and not values:
            checker.problem("suites", key, "is empty: nothing would run (leave the key out for the default)")
        for repeated in sorted({v for v in values if values.count(v) > 1}):
            checker.problem("suites", key, f"{repeated!r} is listed more than once")
    if problems:
        # In file order, so a reader fixes them top to bottom (problems without a line first).
        return sorted(problems, key=lambda problem: problem.line or 0)
    return RepoConfig(
        suites=tuple(dict.fromkeys(run)), devices=tuple(dict.fromkeys(devices)), requirements=tuple(requirements),
        install_package=package is not False,
        targets={k: v for k, v in target_lists.items() if v}, repo_tests=tuple(repo_tests),
        timeout_minutes=timeout, flaky_reruns=reruns, budgets=budgets, comment_always=always,
        torch=tuple(dict.fromkeys(torch)), canary=canary_on is not False,
    )


def requirement_problem(text: str) -> str | None:
    """Why a requirement line is refused, or None: only `name[extras] <specifiers>` from the deployment's indexes."""
    stripped = text.strip()
    if re.search(r"(^|\s)-", stripped):  # also an option after a newline or a space: pip reads those too
        return f"{text!r}: pip options are not allowed (indexes are chosen by the deployment, not the pull request)"
    if "://" in stripped or "/" in stripped or "@" in stripped or stripped.startswith("."):
        return f"{text!r}: URLs and paths are not allowed; name a package from the deployment's index"
    if not _REQUIREMENT.fullmatch(stripped):
        return f"{text!r} is not of the form 'name[extras]>=version' (no options, markers or URLs)"
    name = re.split(r"[\s\[<>=!~]", stripped, maxsplit=1)[0].lower().replace("_", "-")
    if name in IMAGE_PACKAGES:
        return f"{text!r}: {name} comes with the runner image and is not installed again"
    return None


class _Checker:
    def __init__(self, text: str, problems: list[ConfigProblem]) -> None:
        self.lines = text.splitlines()
        self.problems = problems

    def line_of(self, section: str, key: str) -> int | None:
        """Line of `key` inside `[section]` (or of the section header when key is empty)."""
        current = ""
        for number, raw in enumerate(self.lines, start=1):
            line = raw.strip()
            header = re.fullmatch(r"\[\s*([^\]]+?)\s*\]", line)
            if header:
                current = header.group(1)
                if current == section and not key:
                    return number
            elif current == section and key and re.match(rf"{re.escape(key)}\s*=", line):
                return number
        return None

    def problem(self, section: str, key: str, message: str) -> None:
        name = f"[{section}] {key}" if section and key else f"[{section or key}]"
        self.problems.append(ConfigProblem(self.line_of(section, key), f"{name}: {message}"))

    def table(self, data: dict[str, Any], name: str) -> dict[str, Any]:
        value = data.get(name, {})
        if not isinstance(value, dict):
            self.problems.append(ConfigProblem(self.line_of("", name), f"{name} must be a table ([{name}])"))
            return {}
        return value

    def unknown_keys(self, section: str, table: dict[str, Any], known: tuple[str, ...]) -> None:
        for key in table:
            if key not in known:
                self.problem(section, key, f"unknown key (expected one of: {', '.join(known)})")

    def strings(
        self, section: str, table: dict[str, Any], key: str, default: list[str],
        allowed: tuple[str, ...] | None = None, spec: bool = False,
    ) -> list[str]:
        value = table.get(key, default)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.problem(section, key, f"must be a list of strings, got {value!r}")
            return default
        for item in value:
            if allowed is not None and item not in allowed:
                self.problem(section, key, f"unknown value {item!r} (expected one of: {', '.join(allowed)})")
            if spec and not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", item):
                self.problem(section, key, f"{item!r} is not of the form 'package.module:callable'")
        return value
