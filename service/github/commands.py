"""The comment command grammar (pure): a PR comment's text -> the commands it gives, and what each selects."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from service.github.markdown import code_span
from service.repo_config import DEVICES

GRAMMAR = """\
Commands (one per line, at the start of the line):
- `/rerun` re-runs every job of the head commit
- `/rerun failed` re-runs the jobs that did not succeed
- `/rerun cpu`, `/rerun cuda` re-run one device's jobs
- `/rerun <suite> [cpu|cuda]` re-runs one suite, on one device or both
- `/ok-to-test` approves the head commit of a pull request from an outside contributor
- `/cancel` stops the head commit's queued and running jobs
They are accepted from people with write access to the repository and from the author of a trusted pull request."""

VERBS = ("rerun", "ok-to-test", "cancel")
# Anchored at the line start (up to three spaces: four make a Markdown code block), so quoting someone's
# `> /rerun` or mentioning /rerun mid-sentence does nothing. The verb must end the word: `/rerunning`,
# `/usr/bin` and other bots' commands (`/lgtm`, `/assign`) are not ours and get no answer.
_COMMAND = re.compile(r"^ {0,3}/(?P<verb>[a-z][a-z-]*)(?=\s|$)(?P<args>.*)$", re.IGNORECASE)
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_SUITE = re.compile(r"^[a-z][a-z0-9_-]*$")


@dataclass(frozen=True)
class Command:
    verb: str  # rerun | ok-to-test | cancel
    line: str
    failed_only: bool = False
    suite: str | None = None
    device: str | None = None


@dataclass(frozen=True)
class Invalid:
    """One of our verbs with arguments it does not take: answered with the reason and the grammar."""

    line: str
    reason: str


def parse_comment(body: str | None) -> list[Command | Invalid]:
    commands: list[Command | Invalid] = []
    fenced = False
    for raw in (body or "").splitlines():
        if _FENCE.match(raw):
            fenced = not fenced
            continue
        match = None if fenced else _COMMAND.match(raw.rstrip())
        if match is None or match["verb"].lower() not in VERBS:
            continue
        commands.append(_parse(match["verb"].lower(), match["args"].split(), raw.strip()))
    return commands


def _parse(verb: str, args: list[str], line: str) -> Command | Invalid:
    args = [a.lower() for a in args]
    if verb != "rerun":
        return Command(verb, line) if not args else Invalid(line, f"`/{verb}` takes no arguments")
    if not args:
        return Command(verb, line)
    if len(args) > 2:
        return Invalid(line, "`/rerun` takes at most two words")
    first, device = args[0], args[1] if len(args) == 2 else None
    if device is not None and device not in DEVICES:
        return Invalid(line, f"{code_span(device, limit=100)} is not a device (cpu or cuda)")
    if first == "failed":
        return Command(verb, line, failed_only=True, device=device)
    if first in DEVICES:
        return Command(verb, line, device=first) if device is None else Invalid(line, "name one device")
    if not _SUITE.match(first):
        return Invalid(line, f"{code_span(first, limit=100)} is not a suite name")
    return Command(verb, line, suite=first, device=device)


class Selectable(Protocol):
    """What a rerun selects on: a job's suite, device and conclusion (store rows satisfy this)."""

    suite: str
    device: str
    conclusion: str | None


J = TypeVar("J", bound=Selectable)


def select_jobs(command: Command, jobs: Iterable[J]) -> list[J]:
    """The jobs a `/rerun` names; the caller says so when that is none."""
    chosen = []
    for job in jobs:
        if command.suite is not None and job.suite != command.suite:
            continue
        if command.device is not None and job.device != command.device:
            continue
        if command.failed_only and job.conclusion == "success":
            continue
        chosen.append(job)
    return chosen
