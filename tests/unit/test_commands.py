"""The comment command grammar: what a maintainer types, and what compile-ci takes from it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from service.github.commands import GRAMMAR, Command, Invalid, parse_comment, select_jobs


def _summary(body: str) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for c in parse_comment(body):
        if isinstance(c, Invalid):
            out.append(("invalid", c.reason))
        else:
            out.append((c.verb, "failed" if c.failed_only else "", c.suite or "", c.device or ""))
    return out


@pytest.mark.parametrize(("body", "expected"), [
    ("/rerun", [("rerun", "", "", "")]),
    ("/RERUN", [("rerun", "", "", "")]),
    ("/rerun failed", [("rerun", "failed", "", "")]),
    ("/rerun cpu", [("rerun", "", "", "cpu")]),
    ("/rerun CUDA", [("rerun", "", "", "cuda")]),
    ("/rerun correctness", [("rerun", "", "correctness", "")]),
    ("/rerun correctness cuda", [("rerun", "", "correctness", "cuda")]),
    ("/rerun failed cpu", [("rerun", "failed", "", "cpu")]),
    ("/ok-to-test", [("ok-to-test", "", "", "")]),
    ("/Ok-To-Test  ", [("ok-to-test", "", "", "")]),
    ("/cancel", [("cancel", "", "", "")]),
    ("   /rerun", [("rerun", "", "", "")]),
    # several per comment, each on its own line
    ("Flaky runner.\n/ok-to-test\n/rerun cuda\nthanks", [("ok-to-test", "", "", ""), ("rerun", "", "", "cuda")]),
    # CRLF line endings, as browsers send them
    ("/cancel\r\n/rerun\r\n", [("cancel", "", "", ""), ("rerun", "", "", "")]),
])
def test_commands_at_line_start(body: str, expected: list[tuple[str, ...]]) -> None:
    assert _summary(body) == expected


@pytest.mark.parametrize("body", [
    "> /rerun",                                   # quoting someone's command
    ">/rerun cuda",
    "please /rerun this",                         # mid-sentence
    "```\n/rerun\n```",                           # fenced code block
    "~~~\n/ok-to-test\n~~~",
    "    /rerun",                                 # indented code block
    "/rerunning the tests now",                   # not the verb
    "/usr/bin/python crashed",                    # a path
    "/lgtm",                                      # another bot's command
    "/assign @me",
    "",
])
def test_text_that_is_not_a_command(body: str) -> None:
    assert parse_comment(body) == []


def test_only_the_lines_outside_code_blocks_count() -> None:
    body = "Output:\n```\n/cancel\n```\n/rerun failed"
    assert _summary(body) == [("rerun", "failed", "", "")]


@pytest.mark.parametrize(("body", "reason"), [
    ("/rerun cpu cuda", "name one device"),
    ("/rerun correctness gpu", "`gpu` is not a device (cpu or cuda)"),
    ("/rerun a b c", "`/rerun` takes at most two words"),
    ("/rerun Wrong!", "`wrong!` is not a suite name"),
    ("/ok-to-test now", "`/ok-to-test` takes no arguments"),
    ("/cancel all", "`/cancel` takes no arguments"),
])
def test_our_verbs_with_wrong_arguments_are_answered(body: str, reason: str) -> None:
    (parsed,) = parse_comment(body)
    assert isinstance(parsed, Invalid) and parsed.reason == reason and parsed.line == body


JOBS = [SimpleNamespace(suite=s, device=d, conclusion=c, name=f"{s} ({d})") for s, d, c in [
    ("correctness", "cpu", "success"), ("correctness", "cuda", "failure"),
    ("layout", "cpu", "failure"), ("layout", "cuda", "cancelled"),
]]


@pytest.mark.parametrize(("line", "chosen"), [
    ("/rerun", ["correctness (cpu)", "correctness (cuda)", "layout (cpu)", "layout (cuda)"]),
    ("/rerun failed", ["correctness (cuda)", "layout (cpu)", "layout (cuda)"]),
    ("/rerun cuda", ["correctness (cuda)", "layout (cuda)"]),
    ("/rerun layout", ["layout (cpu)", "layout (cuda)"]),
    ("/rerun layout cpu", ["layout (cpu)"]),
    ("/rerun failed cpu", ["layout (cpu)"]),
    ("/rerun fusion", []),
])
def test_which_jobs_a_rerun_selects(line: str, chosen: list[str]) -> None:
    (command,) = parse_comment(line)
    assert isinstance(command, Command)
    assert [j.name for j in select_jobs(command, JOBS)] == chosen


def test_a_reply_shows_the_grammar_only_after_a_misspelt_command() -> None:
    from service.jobs.comment_commands import reply

    refused = reply("maria", ["`/rerun cuda`: correctness (cuda) not re-run: no cuda runner."], ["/rerun cuda"])
    assert refused.startswith("@maria:\n- `/rerun cuda`") and "Commands (one per line" not in refused
    misspelt = reply("maria", ["`/rerun sideways`: no such suite."], ["/rerun cpu", "/rerun cpu gpu x"])
    assert misspelt.endswith(GRAMMAR)
