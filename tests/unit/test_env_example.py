"""deploy/env.example lists every variable the service reads, so an operator never has to read the source."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_setting_is_in_env_example() -> None:
    source = (ROOT / "service" / "config.py").read_text()
    read = set(re.findall(r'(?:PREFIX \+ |env, )"([A-Z][A-Z0-9_]*)"', source))
    listed = set(re.findall(r"^(?:# )?COMPILE_CI_([A-Z0-9_]+)=", (ROOT / "deploy" / "env.example").read_text(), re.M))
    assert len(read) > 15
    assert read - listed == set(), f"settings missing from deploy/env.example: {sorted(read - listed)}"
