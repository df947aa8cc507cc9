"""ANSI colour codes in logs rendered as escaped HTML spans (pytest and torch colour their output)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from markupsafe import Markup, escape

SGR = re.compile(r"\x1b\[([0-9;]*)m")
# Cursor moves, erases and other escape sequences mean nothing in a static view of the log.
OTHER_ESCAPES = re.compile(r"\x1b(\[[0-9;?]*[A-Za-ln-z]|\][^\x07]*\x07|[()][A-Z0-9])")


@dataclass
class AnsiState:
    """The colours in effect; carried from one line to the next, as a terminal would."""

    fg: int | None = None
    bold: bool = False

    def apply(self, codes: str) -> None:
        for raw in codes.split(";") if codes else ["0"]:
            code = int(raw) if raw.isdigit() else 0
            if code == 0:
                self.fg, self.bold = None, False
            elif code == 1:
                self.bold = True
            elif code == 22:
                self.bold = False
            elif 30 <= code <= 37 or 90 <= code <= 97:
                self.fg = code
            elif code == 39:
                self.fg = None

    def css_classes(self) -> str:
        return " ".join(([f"ansi{self.fg}"] if self.fg else []) + (["ansib"] if self.bold else []))


def line_to_html(line: str, state: AnsiState) -> Markup:
    """One log line as HTML: text escaped, colours as `<span class="ansi31">`; updates `state`."""
    line = OTHER_ESCAPES.sub("", line)
    out: list[str] = []
    position = 0
    for match in SGR.finditer(line):
        out.append(_span(line[position:match.start()], state))
        state.apply(match.group(1))
        position = match.end()
    out.append(_span(line[position:], state))
    return Markup("".join(out))


def _span(text: str, state: AnsiState) -> str:
    if not text:
        return ""
    classes = state.css_classes()
    escaped = str(escape(text.replace("\x1b", "")))
    return f'<span class="{classes}">{escaped}</span>' if classes else escaped
