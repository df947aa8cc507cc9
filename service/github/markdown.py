"""The one escaper for text that reaches GitHub as Markdown: job-derived text made inert, and cut to GitHub's limits."""

from __future__ import annotations

import re
from urllib.parse import quote

# GitHub finds @mentions, #references, :emoji: and bare URLs in the text *after* rendering the Markdown, so an
# escape (`\@user`, `&#64;user`) is still a ping there: only code, or a token broken by an invisible joiner, is safe.
JOINER = "\u200d"
# NUL and other C0/C1 controls (bar tab and newline), lone surrogates (not encodable), and the bidirectional
# overrides and line separators that make shown text differ from what it is.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff"
                      "\ud800-\udfff]")
_TOKENS = re.compile(
    r"@"  # @user, @org/team, user@sha, and every `@` an e-mail autolink could be built around
    r"|#(?=\d)"  # #12 and owner/repo#12
    r"|(?i:gh-)(?=\d)"  # GH-12
    r"|:(?=//)"  # scheme:// of a bare URL
    r"|(?i:www)(?=\.)"  # www. autolinks (also after `_` or `*`, which GitHub allows before them)
    r"|:(?=[a-z0-9_+-]+:)"  # :emoji:
)
# Everything that opens Markdown or HTML inline; `_` only where it could emphasise (never inside a word).
_INLINE = re.compile(r"[\\`*~\[\]<>&|]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_LINE_START = re.compile(r"[#+=:-]|(?=\d{1,9}[.)])")  # headings, bullets, setext underlines, table delimiter rows (:-)
_RUN = re.compile(r"`+")
_FENCE_OPEN = re.compile(r" {0,3}(`{3,})[^`]*")


def clean(text: str) -> str:
    """Line endings as `\\n`; control characters, bidirectional overrides and lone surrogates dropped."""
    return _CONTROL.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))


def code_span(text: str, *, table: bool = False, limit: int | None = None) -> str:
    """`text` as inline code that nothing in it can close: fenced by a backtick run longer than any inside it.

    A line break could end the paragraph (and the span with it), so lines are folded. In a table row GitHub
    splits cells at every unescaped `|` before it sees code spans, so `table=True` escapes them (shown as `|`).
    """
    body = " ".join(clean(text).split("\n"))
    body = shorten(body, limit) if limit is not None else body
    fence = "`" * (max((len(run) for run in _RUN.findall(body)), default=0) + 1)
    if body.strip(" ") and (body[0] in "` " or body[-1] in "` "):
        body = f" {body} "  # CommonMark strips one space each side: a backtick at either end stays content
    if table:
        body = body.replace("|", "\\|")
    return f"{fence}{body or ' '}{fence}"


def code_block(text: str, *, limit: int | None = None) -> str:
    """`text` as a fenced code block that no line of it can close: the fence outruns every backtick run inside."""
    body = clean(text)
    body = (shorten(body, limit) if limit is not None else body).strip("\n")
    fence = "`" * max(3, max((len(run) for run in _RUN.findall(body)), default=0) + 1)
    return f"{fence}\n{body}\n{fence}" if body else f"{fence}\n{fence}"


def plain(text: str, *, inline: bool = False) -> str:
    """Prose that cannot be code, shown as the same characters but inert: no markup, HTML, link or ping.

    `inline` folds the lines into one, for text placed inside a line (a list item after its bullet, a table cell:
    `|` is escaped everywhere).
    """
    lines = clean(text).split("\n")
    if inline:
        return _escaped(" ".join(line.strip() for line in lines))
    return "\n".join(_line_start(_escaped(line.lstrip())) for line in lines)


def inert_markdown(text: str) -> str:
    """Text that may hold code spans and fenced code blocks around words from anywhere (a job's detail): its code
    stays code, re-fenced so nothing can close it early, and everything else is made plain."""
    lines, out, i = clean(text).split("\n"), [], 0
    while i < len(lines):
        opening = _FENCE_OPEN.fullmatch(lines[i])
        if opening is None:
            out.append(_with_spans(lines[i]))
            i += 1
            continue
        closing = re.compile(rf" {{0,3}}`{{{len(opening[1])},}}[ \t]*")
        end = next((j for j in range(i + 1, len(lines)) if closing.fullmatch(lines[j])), len(lines))
        out.append(code_block("\n".join(lines[i + 1:end])))
        i = end + 1
    return "\n".join(out)


def link(label: str, url: str) -> str:
    """A link to one of our own pages; `label` is Markdown already made inert (a code span, plain text)."""
    return f"[{label}]({quote(url, safe=':/?#=&%@+,;~!$')})"


def shorten(text: str, limit: int) -> str:
    """`text` whole if at most `limit` characters, else cut before the last line end or else the last space that
    keeps at least half of it (never inside a word or a number), and "…" added: at most `limit` characters."""
    if len(text) <= limit:
        return text
    kept = text[:max(0, limit - 1)]
    for boundary in ("\n", " "):
        at = kept.rfind(boundary)
        if at >= limit // 2:
            return kept[:at].rstrip() + "…"
    return kept + "…"


def plain_title(text: str, limit: int = 255) -> str:
    """Plain text GitHub shows as is (a check run's or an annotation's title): one line, no controls, short."""
    return clip(" ".join(clean(text).split()), limit)


def clip(text: str, max_bytes: int) -> str:
    """At most `max_bytes` of UTF-8, cut at a character boundary (GitHub counts bytes, not characters)."""
    if len(text) * 4 <= max_bytes:
        return text
    return clean(text).encode()[:max_bytes].decode("utf-8", "ignore")


def fit(text: str, max_bytes: int, tail: str) -> str:
    """`text` whole if within `max_bytes`, else cut at a line end (or inside a code block's line), any code block
    left open closed, and `tail` (ours: where the rest is) added. Inline code never spans lines here, so a cut at a
    line end leaves no span open."""
    if len(text.encode()) <= max_bytes:
        return text
    budget = max_bytes - len(tail.encode())
    kept: list[str] = []
    used, fence = 0, ""
    for line in text.split("\n"):
        after = _fence_after(line, fence)
        size = len(line.encode()) + 1
        if used + size + (len(after) + 1 if after else 0) > budget:
            if fence and after:  # inside a code block a line can be cut anywhere: it is shown literally
                part = clip(line, max(0, budget - used - len(fence) - 2))
                kept += [part] if _fence_after(part, fence) else []
            break
        kept.append(line)
        used, fence = used + size, after
    body = "\n".join(kept) + (f"\n{fence}" if fence else "")
    return body + tail if body.strip() else clip(tail.lstrip("\n"), max_bytes)


def _fence_after(line: str, fence: str) -> str:
    """The code block fence open after `line`, given the one open before it ("" for none)."""
    if fence:
        return "" if re.fullmatch(rf" {{0,3}}`{{{len(fence)},}}[ \t]*", line) else fence
    opening = _FENCE_OPEN.fullmatch(line)
    return opening[1] if opening else ""


def _escaped(text: str) -> str:
    broken = _TOKENS.sub(lambda m: m[0] + JOINER, text)
    return _INLINE.sub(lambda m: "\\" + m[0], broken)


def _line_start(line: str) -> str:
    start = _LINE_START.match(line)
    if start is None:
        return line
    if start[0]:
        return "\\" + line
    digits = len(line) - len(line.lstrip("0123456789"))  # `1.` and `1)` start a list: their delimiter is escaped
    return f"{line[:digits]}\\{line[digits:]}"


def _with_spans(line: str) -> str:
    """One line of prose: its code spans (a backtick run closed by one as long) kept as code, the rest plain."""
    runs, parts, start, k = list(_RUN.finditer(line)), [], 0, 0
    while k < len(runs):
        opener = runs[k]
        closer = next((j for j in range(k + 1, len(runs)) if len(runs[j][0]) == len(opener[0])), None)
        if closer is None:
            k += 1
            continue
        content = line[opener.end():runs[closer].start()]
        if content.startswith(" ") and content.endswith(" ") and content.strip():
            content = content[1:-1]
        parts += [_escaped(line[start:opener.start()]), code_span(content)]
        start, k = runs[closer].end(), closer + 1
    parts.append(_escaped(line[start:]))
    first = parts[0].lstrip()
    return "".join([_line_start(first) if first else first, *parts[1:]])
