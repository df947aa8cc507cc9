"""Job-derived text reaches GitHub inert: hostile test ids and messages, rendered by GitHub's own Markdown renderer,
ping nobody, link nowhere but to our pages, embed nothing, carry no HTML, and stay within GitHub's limits."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.github.markdown import clean, code_block, code_span, fit, inert_markdown, link, plain, plain_title, shorten
from tests.rendered import assert_inert, page

URL = "http://ci.example.test/jobs/abc"
TAIL = f"\n\n… cut; the rest is at {URL}/log"

HOSTILE = [
    "@octocat",
    "@org/team please look",
    "![x](http://evil.example/i.png)",
    "[click](http://evil.example)",
    "bare https://evil.example/x and www.evil.example",
    "mail eve@evil.example",
    "<img src=x onerror=alert(1)>",
    "<details><summary>open</summary>hidden</details>",
    "<script>alert(1)</script>",
    "&#64;octocat &lt;img src=x&gt;",
    "\\@octocat",
    "t.py::test[`] @octocat",
    "t.py::test[``] @octocat",
    "t.py::test[" + "`" * 10 + "] @octocat",
    "`@octocat`",
    "` @octocat ![x](http://evil.example/i.png) `",
    "a | b || c",
    "\\| a pipe after a backslash \\",
    "fixes #1, owner/repo#2 and GH-3",
    ":smile: :+1:",
    "line one\nline two\n\n@octocat after a blank line",
    "nul\x00 bell\x07 esc\x1b[31m bidi\u202e @octocat",
    "```\n@octocat\n```",
    "    indented @octocat",
    "# heading @octocat",
    "> quote @octocat",
    "- item @octocat",
    "1. item @octocat",
    "<!-- hidden -->",
    "<https://evil.example>",
    "[ref]: http://evil.example\n[ref]",
    "~~strike~~ **bold** _em_ *em*",
    "a backslash at the end\\\nof a line",
    "\r\n@octocat\rafter CR",
]


def _block(text: str) -> str:
    body = clean(text).strip("\n")
    return body + "\n" if body else ""


def _folded(text: str) -> str:
    return " ".join(clean(text).split("\n")) or " "


@pytest.mark.parametrize("text", HOSTILE)
def test_a_code_span_shows_exactly_the_text_and_nothing_escapes_it(text: str) -> None:
    shown = assert_inert(f"- before {code_span(text)} after")
    assert shown.codes == [_folded(text)]
    assert shown.visible.endswith("after")


@pytest.mark.parametrize("text", HOSTILE)
def test_a_code_span_in_a_table_cell_keeps_the_row_whole(text: str) -> None:
    table = f"| test | figure |\n|---|---|\n| {code_span(text, table=True)} | 3 |"
    shown = assert_inert(table)
    assert shown.codes == [_folded(text)]
    assert shown.tags.count("td") == 2


@pytest.mark.parametrize("text", HOSTILE)
def test_a_code_block_cannot_be_closed_from_inside(text: str) -> None:
    shown = assert_inert(f"{code_block(text)}\n\nafter")
    assert shown.codes == [_block(text)]
    assert shown.tags == ["pre", "code", "p"] and "after" in shown.outside


@pytest.mark.parametrize("text", HOSTILE)
def test_plain_text_reads_the_same_and_is_inert(text: str) -> None:
    for markdown in (plain(text), f"| {plain(text, inline=True)} |\n|---|"):
        shown = assert_inert(markdown)
        assert shown.visible == " ".join(clean(text).split())
        assert shown.codes == []


ALPHABET = st.sampled_from(list("`@#:/<>[]()!|\\*_~&;=-+. \n\r\taGHw0x1\x00\u202e") + ["www.", "http", "GH-"])


@settings(max_examples=300, deadline=None)
@given(st.lists(ALPHABET, max_size=40).map("".join))
def test_any_text_stays_code_or_plain(text: str) -> None:
    assert assert_inert(f"- {code_span(text)}").codes == [_folded(text)]
    assert assert_inert(f"| {code_span(text, table=True)} |\n|---|").codes == [_folded(text)]
    assert assert_inert(code_block(text)).codes == [_block(text)]
    assert assert_inert(plain(text)).visible == " ".join(clean(text).split())
    assert_inert(inert_markdown(text))


@pytest.mark.parametrize(("detail", "codes"), [
    # Our words around code: the code stays code, re-fenced; a mention in our words is broken.
    ("Nothing has run: @eve is not a member; comment `/ok-to-test`.", ["/ok-to-test"]),
    # A config's problem quoting the job's own value inside our fence.
    ("Nothing ran.\n\n```\n.compile-ci.toml:3: got '@octocat ![x](http://evil.example/i.png)'\n```",
     [".compile-ci.toml:3: got '@octocat ![x](http://evil.example/i.png)'\n"]),
    # pip's lines in a fence of three (as install.py builds it today) that close it and go on as Markdown:
    # what follows the early close is made plain, and the fence left open is closed.
    ("Nothing was tested.\n\n```\nERROR: x\n```\n@octocat ![x](http://evil.example/i.png) <img src=x>\n```",
     ["ERROR: x\n", ""]),
])
def test_a_jobs_detail_keeps_our_code_and_nothing_else(detail: str, codes: list[str]) -> None:
    assert assert_inert(inert_markdown(detail)).codes == codes


def test_our_links_only_go_to_our_pages() -> None:
    shown = assert_inert(link(code_span("t.py::test[a) (b]"), f"{URL}/tests/t (1)"))
    assert shown.hrefs == [f"{URL}/tests/t%20%281%29"] and shown.codes == ["t.py::test[a) (b]"]


@pytest.mark.parametrize("text", ["short", "a\x00b\nc\td " * 200, "☃" * 300, "@octocat\u202e" * 50])
def test_a_title_is_one_line_of_at_most_255_bytes_without_controls(text: str) -> None:
    shown = plain_title(text)
    assert len(shown.encode()) <= 255 and "\n" not in shown and clean(shown) == shown
    assert shown == " ".join(clean(text).split())[: len(shown)]


@pytest.mark.parametrize("fence", [0, 2, 10])
@pytest.mark.parametrize(("line", "lines"), [("x", 5000), ("☃" * 7, 5000), ("y" * 100_000, 3)])
def test_a_cut_inside_a_code_block_closes_it_and_stays_in_bytes(fence: int, line: str, lines: int) -> None:
    body = "\n".join([f"{'`' * fence} {line} @octocat"] * lines)
    cut = fit(f"{plain('Intro @octocat')}\n\n{code_block(body)}\n\nafter", 20_000, TAIL)
    assert len(cut.encode()) <= 20_000
    shown = assert_inert(cut)
    assert shown.tags[-4:] == ["pre", "code", "p", "a"] and "after" not in shown.outside  # closed, then the tail
    assert shown.visible.endswith(f"the rest is at {URL}/log") and shown.hrefs == [f"{URL}/log"]


def test_a_cut_between_lines_leaves_no_code_span_open() -> None:
    listed = "\n".join(f"- {code_span('` @octocat ![x](http://evil.example/i.png) ' * 3)}" for _ in range(3000))
    cut = fit(listed, 65_535, TAIL)
    assert len(cut.encode()) <= 65_535 < len(listed.encode())
    assert assert_inert(cut).hrefs == [f"{URL}/log"]


@pytest.mark.parametrize(("text", "limit", "cut"), [
    ("assert x == 1", 40, "assert x == 1"),  # within the limit: whole
    ("assert tensor([0.1234, 0.5678, 0.9012]) == tensor([0.0])", 30, "assert tensor([0.1234,…"),  # between tokens
    ("first line here\nsecond line is long", 25, "first line here…"),  # a line end before a space
    ("x" * 50, 10, "x" * 9 + "…"),  # one token: cut where it must be
    ("a " + "y" * 40, 20, "a " + "y" * 17 + "…"),  # a boundary keeping under half is no boundary
])
def test_shortened_text_ends_between_words_with_an_ellipsis(text: str, limit: int, cut: str) -> None:
    assert shorten(text, limit) == cut and len(cut) <= limit


def test_a_code_span_or_block_cut_to_a_limit_ends_between_tokens() -> None:
    assert code_span("AssertionError: expected 0.123456 got 0.654321", limit=40) == \
        "`AssertionError: expected 0.123456 got…`"
    assert code_block("line one\nline two\nline three", limit=20) == "```\nline one\nline two…\n```"


def test_a_first_line_too_long_to_keep_leaves_only_the_tail() -> None:
    assert fit(plain("@octocat " * 10_000), 1000, TAIL) == TAIL.lstrip("\n")


def test_the_page_sees_what_github_would_resolve() -> None:
    """The net itself can fail: raw job text is caught."""
    for raw in ("@octocat", "![x](http://evil.example/i.png)", "<details>", "fixes #1", "`a`` @octocat"):
        with pytest.raises(AssertionError):
            assert_inert(raw)
    assert page("`a`").codes == ["a"]
