"""Test-only: our Markdown as GitHub shows it (cmark-gfm, GitHub's own renderer, with its extensions and raw HTML
allowed), and what a reader of that HTML could be pinged, linked, shown or made to run by."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import cmarkgfm
from cmarkgfm.cmark import Options

from service.github.markdown import JOINER

# Tags our own Markdown makes; anything else came from text that should have been inert.
OURS = {"p", "code", "pre", "a", "ul", "ol", "li", "strong", "em", "h3", "table", "thead", "tbody", "tr", "th",
        "td", "hr", "br"}
# What GitHub finds in rendered text outside code and links, after the Markdown (a stricter net than GitHub's
# own: `@` before any letter, not only after a space).
LIVE = {
    "mention": re.compile(r"@(?=[A-Za-z0-9])"),
    "reference": re.compile(r"#\d|(?i:\bgh-\d)"),
    "bare URL": re.compile(r"://|(?i:\bwww\.)"),
    "emoji": re.compile(r":[a-z0-9_+-]+:"),
}


def render(markdown: str) -> str:
    return cmarkgfm.markdown_to_html_with_extensions(
        markdown, options=Options.CMARK_OPT_UNSAFE, extensions=["table", "autolink", "tagfilter", "strikethrough"])


class Page(HTMLParser):
    """One rendered document: its tags, links, comments, the text of each code element, and the text outside
    code, pre and links (where GitHub would resolve mentions and references)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.hrefs: list[str] = []
        self.comments: list[str] = []
        self.codes: list[str] = []
        self.outside: list[str] = []
        self.text: list[str] = []
        self._open: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.hrefs += [value or "" for name, value in attrs if name in ("href", "src")]
        if tag not in ("br", "hr", "img", "input"):
            self._open.append(tag)
        if tag == "code":
            self.codes.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._open:
            while self._open.pop() != tag:
                pass

    def handle_comment(self, data: str) -> None:
        self.comments.append(data)

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if "code" in self._open:
            self.codes[-1] += data
        elif not {"pre", "a"} & set(self._open):
            self.outside.append(data)

    @property
    def visible(self) -> str:
        """All the text, without our invisible joiners, whitespace collapsed."""
        return " ".join("".join(self.text).replace(JOINER, "").split())


def page(markdown: str) -> Page:
    parsed = Page()
    parsed.feed(render(markdown))
    parsed.close()
    return parsed


def assert_inert(markdown: str, our_urls: tuple[str, ...] = ("http://ci.example.test/",),
                 our_comments: tuple[str, ...] = ()) -> Page:
    """No image, no link but to our pages, no tag we did not make, nothing GitHub would resolve."""
    shown = page(markdown)
    assert "img" not in shown.tags, markdown
    assert set(shown.tags) <= OURS, set(shown.tags) - OURS
    assert [h for h in shown.hrefs if not h.startswith(our_urls)] == [], shown.hrefs
    assert [c for c in shown.comments if c not in our_comments] == [], shown.comments
    live = {name: found for name, pattern in LIVE.items()
            if (found := [text for text in shown.outside if pattern.search(text)])}
    assert live == {}, live
    return shown
