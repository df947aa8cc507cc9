"""Parametrize the passes suite over the repository's declared graph passes and the models they run on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from .. import targets
from ..harness import DECLARED_PASS_HOOKS

HOOK_FOR_KIND = DECLARED_PASS_HOOKS  # which inductor hook runs each kind of declared pass
NO_PASSES_REASON = "no pre_grad_passes, post_grad_passes or joint_passes declared in .compile-ci.toml [targets]"


@dataclass(frozen=True)
class DeclaredPass:
    """A declared ``module:callable`` graph pass and the inductor config hook it is installed on."""

    kind: str
    hook: str
    spec: str
    fn: Any

    @property
    def test_id(self) -> str:
        return targets.readable_id(f"{self.kind}:{self.spec}")


def declared_passes() -> list[DeclaredPass | targets.TargetError]:
    entries: list[DeclaredPass | targets.TargetError] = []
    for kind, hook in HOOK_FOR_KIND.items():
        for entry in targets.declared_callables(kind):
            if isinstance(entry, targets.TargetError):
                entries.append(targets.TargetError(entry.spec, entry.message, id_hint=f"{kind}:{entry.spec}"))
            else:
                entries.append(DeclaredPass(kind, hook, entry.spec, entry.fn))
    return entries


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "declared_pass" in metafunc.fixturenames:
        entries = declared_passes()
        if entries:
            metafunc.parametrize("declared_pass", entries, ids=[entry.test_id for entry in entries])


@pytest.fixture
def declared_pass() -> None:
    pytest.skip(NO_PASSES_REASON)
