"""The README stays what a newcomer reads, and docs/ keeps every setting, every .compile-ci.toml key and every link.

A setting or a key added without its documentation fails here, as does a link to a section that moved."""

from __future__ import annotations

import re
from pathlib import Path

from service.repo_config import CONFIG_KEYS

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _prose(text: str) -> str:
    """The text outside fenced code blocks (a `#` line there is a comment, not a heading)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def _anchors(page: Path) -> set[str]:
    return {_anchor(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", _prose(page.read_text()), re.M)}


def test_the_readme_is_what_a_newcomer_needs() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    quickstart = text.split("## Quickstart", 1)[1]
    commands = quickstart.split("```", 2)[1].split()
    assert " ".join(commands) == "bash scripts/sandbox.sh bash scripts/test.sh"
    for doc in ("configuring", "suites", "security", "operating", "browser", "benchmarks", "development"):
        assert f"(docs/{doc}.md)" in text, doc  # where to go next


def test_every_setting_is_documented_for_operators() -> None:
    source = (ROOT / "service" / "config.py").read_text()
    read = set(re.findall(r'(?:PREFIX \+ |env, )"([A-Z][A-Z0-9_]*)"', source))
    documented = set(re.findall(r"`COMPILE_CI_([A-Z0-9_]+)`", (DOCS / "operating.md").read_text()))
    assert len(read) > 40
    assert read - documented == set(), f"settings missing from docs/operating.md: {sorted(read - documented)}"


def test_every_compose_variable_is_documented_for_operators() -> None:
    """deploy/compose.yaml's own `${COMPILE_CI_...}` variables (images, ports, the env file) are settings too."""
    used = set(re.findall(r"\$\{COMPILE_CI_([A-Z0-9_]+)", (ROOT / "deploy" / "compose.yaml").read_text()))
    documented = set(re.findall(r"`COMPILE_CI_([A-Z0-9_]+)`", (DOCS / "operating.md").read_text()))
    assert {"SERVICE_IMAGE", "ENV_FILE", "HOST_DATA_DIR"} <= used
    assert used - documented == set(), f"compose variables missing from docs/operating.md: {sorted(used - documented)}"


def test_every_config_key_is_documented_for_maintainers() -> None:
    text = (DOCS / "configuring.md").read_text()
    keys = {f"{table}.{key}" for table, names in CONFIG_KEYS.items() for key in names}
    assert len(keys) >= 20
    missing = {key for key in keys if f"| `{key}` |" not in text}
    assert missing == set(), f"keys missing from docs/configuring.md's key table: {sorted(missing)}"


def test_every_link_between_the_pages_lands() -> None:
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", _prose(page.read_text())):
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto: not ours to check
            path, _, anchor = target.partition("#")
            landing = (page.parent / path).resolve() if path else page
            if not landing.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and landing.suffix == ".md" and anchor not in _anchors(landing):
                broken.append(f"{page.name}: {target} (no such section)")
    assert broken == []
